package admin

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/idemhq/idem/store/readmodel"
)

//go:embed templates/*.html
var templateFiles embed.FS

//go:embed assets
var assetFiles embed.FS

// pages holds one template set per page: the layout plus the page.
var pages = mustParsePages()

var funcs = template.FuncMap{
	"ago":      ago,
	"when":     func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 MST") },
	"pathesc":  url.PathEscape,
	"short":    shorten,
	"rate":     func(f float64) string { return fmt.Sprintf("%.1f", f) },
	"seconds":  seconds,
	"agoAt":    agoAt,
	"json":     prettyJSON,
	"diagram":  layout,
	"query":    query,
	"add":      func(a, b int) int { return a + b },
	"deref":    func(p *int) int { return *p },
	"contains": strings.Contains,
	"sub":      sub,
	"rfc3339":  func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) },
	"tm":       func(t time.Time) template.HTML { return timeTag(t, time.Now()) },
	"tmAt":     timeTag,
	"live":     livePage,
	"rowid":    rowID,
	"count":    countText,
	"histname": historyFileName,
}

// subView is what the shared tables of parts.html receive.
type subView struct {
	Root   view
	Rows   any
	Timers any
	Back   string
	Now    time.Time
}

func sub(root view, rows any, back string, now time.Time) subView {
	return subView{Root: root, Rows: rows, Timers: rows, Back: back, Now: now}
}

func mustParsePages() map[string]*template.Template {
	layout := template.Must(template.New("layout").Funcs(funcs).ParseFS(templateFiles, "templates/layout.html", "templates/parts.html", "templates/history.html"))
	names, err := fs.Glob(templateFiles, "templates/*.html")
	if err != nil {
		panic(err)
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		name := strings.TrimSuffix(strings.TrimPrefix(n, "templates/"), ".html")
		if name == "layout" || name == "parts" || name == "history" {
			continue
		}
		out[name] = template.Must(template.Must(layout.Clone()).ParseFS(templateFiles, n))
	}
	return out
}

// view is what every page template receives.
type view struct {
	Title string
	Nav   string
	Base  string
	// SignedIn is set when the browser has a session (Config.Token set).
	SignedIn bool
	ReadOnly bool
	Auth     bool
	Data     any
}

// render executes page into a buffer first, so a template error never
// sends half a page.
func (c *console) render(w http.ResponseWriter, r *http.Request, status int, page, title string, data any) {
	v := view{Title: title, Nav: page, Base: basePath(r), ReadOnly: c.readOnly, Auth: c.auth, Data: data}
	v.SignedIn = sessionOf(r) != nil
	tmpl := "layout"
	if r.Header.Get("HX-Request") == "true" && r.Header.Get("HX-Boosted") != "true" {
		tmpl = "content" // a fragment for htmx polling
	}
	var buf bytes.Buffer
	if err := pages[page].ExecuteTemplate(&buf, tmpl, v); err != nil {
		c.log.ErrorContext(r.Context(), "admin: render console page", "page", page, "error", err)
		http.Error(w, "the page could not be rendered: see the server log", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	w.Header().Set("X-Frame-Options", "DENY")
	w.Header().Set("Referrer-Policy", "same-origin")
	w.WriteHeader(status)
	_, _ = w.Write(neutraliseBidi(buf.Bytes()))
}

// consoleError renders an error page with a fixed message (never the
// error's text, which may name hosts or paths).
func (c *console) consoleError(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, status, "error", http.StatusText(status), msg)
}

// storeFailed logs err and renders a 500 or 503 page; a mark the store
// refused (readmodel.ErrBadMark) renders a 400 page instead, not logged.
func (c *console) storeFailed(w http.ResponseWriter, r *http.Request, op string, err error) {
	if errors.Is(err, readmodel.ErrBadMark) {
		c.consoleError(w, r, http.StatusBadRequest, "The count this form was confirmed on is not one this store made ("+op+"). Go back to the dead letters page and count again.")
		return
	}
	c.log.ErrorContext(r.Context(), "admin console: "+op, "error", err, "path", r.URL.Path)
	c.consoleError(w, r, http.StatusServiceUnavailable, "The store did not answer ("+op+"). See the server log, then reload.")
}

// ago says how long ago t was, or how far ahead it is, with span.
func ago(t time.Time) string { return agoAt(t, time.Now()) }

func agoAt(t, now time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d, suffix := now.Sub(t), " ago"
	if d < 0 {
		d, suffix = -d, " from now"
	}
	if d < time.Second {
		return "just now"
	}
	return span(d) + suffix
}

// seconds formats a number of seconds with span.
func seconds(f float64) string {
	if f <= 0 {
		return "0s"
	}
	return span(time.Duration(f * float64(time.Second)))
}

// span is the one duration format of the console: seconds below a
// minute, then minutes and seconds below an hour, then to the minute
// ("1h 59m", "2d 3h 0m"). It truncates: a timer due in 1h 59m 50s is
// shown due in 1h 59m, never rounded down to the hour.
func span(d time.Duration) string {
	s := int64(d.Abs() / time.Second)
	days, h, m := s/86400, s%86400/3600, s%3600/60
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm %ds", m, s%60)
	case days == 0:
		return fmt.Sprintf("%dh %dm", h, m)
	}
	return fmt.Sprintf("%dd %dh %dm", days, h, m)
}

// query builds "?k=v&..." from pairs, leaving out empty values.
func query(kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			q.Set(kv[i], kv[i+1])
		}
	}
	if len(q) == 0 {
		return ""
	}
	return "?" + q.Encode()
}

func urlQueryEscape(s string) string { return url.QueryEscape(s) }

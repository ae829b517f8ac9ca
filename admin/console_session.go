package admin

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	sessionCookie = "idem_session"
	maxSessions   = 10_000
)

// session is one browser's login (with Config.Token set).
type session struct {
	id      string
	expires time.Time
}

// sessions is the server's session table, in memory: a restart logs
// every browser out.
type sessions struct {
	ttl time.Duration
	mu  sync.Mutex
	m   map[string]*session
	// limit bounds failed logins; now is the clock of both (time.Now,
	// or a test's).
	limit *loginLimiter
	now   func() time.Time
}

func newSessions(ttl time.Duration) *sessions {
	if ttl == 0 {
		ttl = 12 * time.Hour
	}
	return &sessions{ttl: ttl, m: map[string]*session{}, limit: newLoginLimiter(), now: time.Now}
}

func randomToken() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session; nil when the table is full of live sessions.
func (ss *sessions) create(now time.Time) *session {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if len(ss.m) >= maxSessions {
		for id, s := range ss.m {
			if now.After(s.expires) {
				delete(ss.m, id)
			}
		}
		// Still full: evict the session closest to expiry, so that a flood
		// of logins cannot lock the operator out.
		var oldest *session
		for _, s := range ss.m {
			if oldest == nil || s.expires.Before(oldest.expires) {
				oldest = s
			}
		}
		if oldest != nil && len(ss.m) >= maxSessions {
			delete(ss.m, oldest.id)
		}
	}
	s := &session{id: randomToken(), expires: now.Add(ss.ttl)}
	ss.m[s.id] = s
	return s
}

// get returns the live session of r's cookie, or nil.
func (ss *sessions) get(r *http.Request, now time.Time) *session {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return nil
	}
	ss.mu.Lock()
	defer ss.mu.Unlock()
	s := ss.m[c.Value]
	if s == nil || now.After(s.expires) {
		delete(ss.m, c.Value)
		return nil
	}
	return s
}

func (ss *sessions) delete(id string) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	delete(ss.m, id)
}

type sessionCtxKey struct{}

func sessionOf(r *http.Request) *session {
	s, _ := r.Context().Value(sessionCtxKey{}).(*session)
	return s
}

// setCookie sends the session cookie: HttpOnly, SameSite=Strict, limited to
// the console's path, Secure over TLS.
func setCookie(w http.ResponseWriter, r *http.Request, s *session, maxAge int) {
	http.SetCookie(w, &http.Cookie{
		Name: sessionCookie, Value: s.id, Path: basePath(r) + "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
}

// basePath is the prefix under which the server is mounted: "" at the
// root, "/idem" under http.StripPrefix("/idem", srv).
func basePath(r *http.Request) string {
	full := r.RequestURI
	if i := strings.IndexAny(full, "?#"); i >= 0 {
		full = full[:i]
	}
	if u, err := url.Parse(full); err == nil && u.IsAbs() {
		full = u.EscapedPath() // absolute-form request URI (a proxy's, or httptest's)
	}
	return strings.TrimSuffix(strings.TrimSuffix(full, r.URL.EscapedPath()), "/")
}

// consolePage wraps a console handler: with Config.Token set it finds the
// browser's session and sends browsers without one to the login form; it
// refuses every POST of a read-only console. CSRF is refused before, for
// every route, by ServeHTTP's http.CrossOriginProtection: a browser's POST
// from another origin never gets here, so console forms carry no token.
func (c *console) consolePage(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sess := c.sessions.get(r, c.sessions.now())
		if sess == nil && c.auth {
			c.toLogin(w, r)
			return
		}
		if r.Method == http.MethodPost && c.readOnly && r.URL.Path != "/logout" {
			c.consoleError(w, r, http.StatusForbidden, "This console is read-only: nothing can be changed here.")
			return
		}
		if sess != nil {
			r = r.WithContext(context.WithValue(r.Context(), sessionCtxKey{}, sess))
		}
		h(w, r)
	})
}

func (c *console) toLogin(w http.ResponseWriter, r *http.Request) {
	target := basePath(r) + "/login"
	if r.Method == http.MethodGet {
		target += "?next=" + urlQueryEscape(r.URL.RequestURI())
	}
	if r.Header.Get("HX-Request") == "true" {
		w.Header().Set("HX-Redirect", target)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	http.Redirect(w, r, target, http.StatusSeeOther)
}

func (c *console) loginForm(w http.ResponseWriter, r *http.Request) {
	if !c.auth {
		http.Redirect(w, r, basePath(r)+"/", http.StatusSeeOther)
		return
	}
	c.render(w, r, http.StatusOK, "login", "Sign in", map[string]string{"Next": safeNext(r.URL.Query().Get("next"))})
}

func (c *console) login(w http.ResponseWriter, r *http.Request) {
	if !c.auth {
		http.Redirect(w, r, basePath(r)+"/", http.StatusSeeOther)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	tried := r.PostFormValue("token")
	if tried != "" && c.loginLimited(w, r) { // see limit.go
		return
	}
	got := sha256.Sum256([]byte(tried))
	next := safeNext(r.PostFormValue("next"))
	if subtle.ConstantTimeCompare(got[:], c.token[:]) != 1 {
		if tried != "" {
			c.wrongToken(r)
		}
		c.render(w, r, http.StatusUnauthorized, "login", "Sign in", map[string]string{"Next": next, "Error": "That token is not the admin token."})
		return
	}
	sess := c.sessions.create(c.sessions.now())
	if sess == nil {
		http.Error(w, "too many console sessions: retry later", http.StatusServiceUnavailable)
		return
	}
	setCookie(w, r, sess, int(c.sessions.ttl.Seconds()))
	http.Redirect(w, r, basePath(r)+next, http.StatusSeeOther)
}

func (c *console) logout(w http.ResponseWriter, r *http.Request) {
	if sess := sessionOf(r); sess != nil {
		c.sessions.delete(sess.id)
		setCookie(w, r, sess, -1)
	}
	http.Redirect(w, r, basePath(r)+"/login", http.StatusSeeOther)
}

// safeNext keeps a post-login target inside the console: a path relative
// to the base, never another host.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return "/"
	}
	return next
}

// loginLimited answers the login page with 429, and returns true, when r's
// client may not try a token now.
func (c *console) loginLimited(w http.ResponseWriter, r *http.Request) bool {
	secs, refused := c.limited(w, r)
	if refused {
		msg := "Too many wrong tokens: wait " + strconv.Itoa(secs) + " s, then try again."
		c.render(w, r, http.StatusTooManyRequests, "login", "Sign in", map[string]string{"Next": safeNext(r.PostFormValue("next")), "Error": msg})
	}
	return refused
}

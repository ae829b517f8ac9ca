package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/idemhq/idem/admin"
)

// The Limits page lists each limit with its counters, hostile names and
// keys as text; a set asks first, then overrides; a reset asks, then
// removes the override; bad values and names are refused with a page
// that says which field.
func TestConsoleLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	lim := limiterOf(t, b)
	seedLimits(t, lim)
	br := newBrowser(t, b)

	code, page := br.get("/limits")
	if code != http.StatusOK {
		t.Fatalf("GET /limits: %d", code)
	}
	for _, bad := range []string{hostileLimit, hostileTenant, "<img src=x"} {
		if strings.Contains(page, bad) {
			t.Errorf("the page holds %q unescaped", bad)
		}
	}
	for _, want := range []string{`data-limit="parser-api"`, "2 at once, 20/s (burst 5)", `data-key="tenant-a"`, "at cap",
		"&lt;script&gt;alert(&#34;limit&#34;)&lt;/script&gt;", "&lt;img src=x onerror=alert(&#34;key&#34;)&gt;", `data-live="3"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the Limits page lacks %s:\n%s", want, page)
		}
	}

	// Set: the first POST asks, on the page, with the values to be.
	form := url.Values{"name": {"parser-api"}, "concurrency": {"4"}, "rate": {"2.5"}, "burst": {""}}
	resp, _ := br.post("/limits/set", form)
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "confirm=set") {
		t.Fatalf("unconfirmed set: %d to %q, want a redirect to the question", resp.StatusCode, resp.Header.Get("Location"))
	}
	if over, _ := lim.Limits(context.Background()); len(over) != 0 {
		t.Fatalf("an unconfirmed set changed the store: %+v", over)
	}
	code, page = br.get(strings.TrimPrefix(resp.Header.Get("Location"), b.srv.URL))
	if code != http.StatusOK || !strings.Contains(page, `id="confirm-limit"`) || !strings.Contains(page, "4 at once, 2.5/s (burst 1)") {
		t.Fatalf("the question: %d, want it with 4 at once, 2.5/s (burst 1):\n%s", code, page)
	}
	form.Set("confirm", "yes")
	if resp, body := br.post("/limits/set", form); resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "done=set") {
		t.Fatalf("confirmed set: %d %s", resp.StatusCode, body)
	}
	over, err := lim.Limits(context.Background())
	if err != nil || len(over) != 1 || over[0].Concurrency != 4 || over[0].Rate != 2.5 || over[0].Burst != 0 {
		t.Fatalf("the store's overrides after the set: %+v %v, want parser-api 4, 2.5/s, burst 0", over, err)
	}
	_, page = br.get("/limits?done=set")
	if !strings.Contains(page, "Override set") || strings.Contains(page, "at cap") {
		t.Errorf("after the set the page has no flash, or still shows tenant-a at its cap (2 of 4):\n%s", page)
	}

	// Reset asks too, then removes the override.
	resp, _ = br.post("/limits/reset", url.Values{"name": {"parser-api"}})
	if loc := resp.Header.Get("Location"); !strings.Contains(loc, "confirm=reset") {
		t.Fatalf("unconfirmed reset: to %q, want the question", loc)
	}
	if resp, body := br.post("/limits/reset", url.Values{"name": {"parser-api"}, "confirm": {"yes"}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("confirmed reset: %d %s", resp.StatusCode, body)
	}
	if over, _ := lim.Limits(context.Background()); len(over) != 0 {
		t.Errorf("after the reset the store holds %+v, want no override", over)
	}

	for _, c := range []struct {
		path string
		form url.Values
		code int
		want string
	}{
		{"/limits/set", url.Values{"name": {"parser-api"}, "concurrency": {"-1"}, "confirm": {"yes"}}, http.StatusBadRequest, "concurrency"},
		{"/limits/set", url.Values{"name": {"parser-api"}, "rate": {"NaN"}, "confirm": {"yes"}}, http.StatusBadRequest, "rate"},
		{"/limits/set", url.Values{"name": {"parser-api"}, "burst": {"<script>"}, "confirm": {"yes"}}, http.StatusBadRequest, "burst"},
		{"/limits/set", url.Values{"name": {"a\x00b"}, "confirm": {"yes"}}, http.StatusBadRequest, "name"},
		{"/limits/set", url.Values{"name": {"a\xffb"}, "confirm": {"yes"}}, http.StatusBadRequest, "name"},
		{"/limits/reset", url.Values{"name": {"<b>nobody</b>"}, "confirm": {"yes"}}, http.StatusNotFound, "No engine declares"},
	} {
		resp, body := br.post(c.path, c.form)
		if resp.StatusCode != c.code || !strings.Contains(body, c.want) || strings.Contains(body, "<b>nobody") || strings.Contains(body, "<script>") {
			t.Errorf("POST %s %v: %d, want %d naming %q:\n%s", c.path, c.form, resp.StatusCode, c.code, c.want, body)
		}
	}
	for path, want := range map[string]int{
		"/limits?confirm=set&name=a%00b":                    http.StatusNotFound,
		"/limits?confirm=set&name=parser-api&concurrency=x": http.StatusBadRequest,
		"/limits?edit=%3Cscript%3E":                         http.StatusNotFound,
		"/limits?edit=parser-api":                           http.StatusOK,
	} {
		if code, page := br.get(path); code != want || strings.Contains(page, hostileLimit) || strings.Contains(page, "<script>") {
			t.Errorf("GET %s: %d, want %d", path, code, want)
		}
	}
	if resp, _ := br.post("/limits/set", form, "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a cross-site set: %d, want 403", resp.StatusCode)
	}

	ro := setup(t, &admin.Config{ReadOnly: true})
	seedLimits(t, limiterOf(t, ro))
	rb := newBrowser(t, ro)
	if _, page := rb.get("/limits"); strings.Contains(page, `data-action="edit"`) || !strings.Contains(page, `data-limit="parser-api"`) {
		t.Errorf("a read-only console lists no limit or offers a change:\n%s", page)
	}
	if resp, _ := rb.post("/limits/set", form); resp.StatusCode != http.StatusForbidden {
		t.Errorf("a read-only set: %d, want 403", resp.StatusCode)
	}
	if code, _ := rb.get("/limits?edit=parser-api"); code != http.StatusForbidden {
		t.Errorf("a read-only edit form: %d, want 403", code)
	}
}

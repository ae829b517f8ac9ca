package admin_test

import (
	"encoding/base64"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// The instances and timers lists filter by a time range, count what they
// select, and refuse a range they cannot read with the reason, escaped.
func TestConsoleTimeRanges(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	old := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	cursor := base64.RawURLEncoding.EncodeToString([]byte(`{"t":"order","k":"old-001"}`))
	insertOrders(t, b, "old-", 3, old)
	insertOrders(t, b, "new-", 2, time.Now())
	for _, tc := range []struct {
		name, query string
		code        int
		want        []string
		not         []string
	}{
		{"updated before", "?to=2026-01-02T03:04:06", 200, []string{"old-000", "old-002", "<b>3</b> instance(s) match", `value="2026-01-02T03:04:06"`}, []string{"new-000"}},
		{"updated from, RFC 3339", "?from=2026-01-02T03:04:06Z", 200, []string{"new-000", "new-001", "<b>2</b> instance(s) match"}, []string{"old-000"}},
		{"updated from a date", "?from=2026-01-02&prefix=old-", 200, []string{"old-001", "<b>3</b> instance(s) match", `value="2026-01-02T00:00"`}, nil},
		{"empty range", "?from=2026-01-03T00:00&to=2026-01-02T00:00", 400, []string{"the end must come after the start"}, []string{"old-000"}},
		{"not a time", "?from=" + url.QueryEscape("<script>alert(1)</script>"), 400, []string{"Updated from: &#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34; is not a time"}, []string{"<script>alert"}},
		{"both cursors", "?after=" + cursor + "&before=" + cursor, 400, []string{"give either after or before, not both"}, nil},
	} {
		code, body := b.do(t, http.MethodGet, "/instances"+tc.query, "")
		if code != tc.code {
			t.Errorf("%s: status %d, want %d", tc.name, code, tc.code)
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: the page lacks %q", tc.name, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(body, n) {
				t.Errorf("%s: the page has %q", tc.name, n)
			}
		}
	}
	code, body := b.do(t, http.MethodGet, "/timers?to=nope%00", "")
	if code != http.StatusBadRequest || !strings.Contains(body, "Due before: &#34;nope\\x00&#34; is not a time") {
		t.Errorf("timers with a bad due filter: status %d, want 400 naming the field:\n%s", code, body)
	}
}

// Every time is a <time> element with both forms, relative showing
// without JavaScript; the list and detail pages are live regions, and a
// form page is not.
func TestConsoleLiveMarkup(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	insertOrders(t, b, "m-", 1, time.Date(2026, 11, 25, 9, 30, 15, 0, time.UTC))
	_, body := b.do(t, http.MethodGet, "/instances", "")
	if want := `<time datetime="2026-11-25T09:30:15Z" title="2026-11-25 09:30:15 UTC"><span class="t-rel">`; !strings.Contains(body, want) {
		t.Errorf("instances: no %q", want)
	}
	if want := `<span class="t-abs">2026-11-25 09:30:15 UTC</span></time>`; !strings.Contains(body, want) {
		t.Errorf("instances: no %q", want)
	}
	for path, live := range map[string]string{"/": `data-live="2"`, "/instances": `data-live="3"`, "/instances/order/m-000": `data-live="3"`,
		"/timers": `data-live="3"`, "/dead-letters": `data-live="3"`, "/schedules": `data-live="5"`, "/sagas": `data-live="5"`} {
		if _, body := b.do(t, http.MethodGet, path, ""); !strings.Contains(body, `<main id="main" `+live+`>`) {
			t.Errorf("GET %s: <main> is not live (%s)", path, live)
		}
	}
	if _, body := b.do(t, http.MethodGet, "/nowhere", ""); !strings.Contains(body, `<main id="main">`) {
		t.Error("the error page is a live region: want a plain <main>")
	}
	// The live refresh asks for the fragment: main's content, no layout.
	_, frag := b.do(t, http.MethodGet, "/instances", "", "HX-Request", "true")
	if strings.Contains(frag, "<main") || !strings.Contains(frag, `id="instances"`) {
		t.Errorf("the htmx fragment of /instances is not the content of <main>:\n%.300s", frag)
	}
}

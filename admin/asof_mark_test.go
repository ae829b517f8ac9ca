package admin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// A malformed as_of is bad input: 400 naming it from the API, a 400 page
// from the console, never a 500 with an ERROR log.
func TestBadMarkIsBadRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	for _, mark := range []string{"<script>", "5:3:", "1\x00", "\xff", "99999999999999999999"} {
		for _, path := range []string{"/api/dead-letters/counts?as_of=", "/api/dead-letters?reason=unknown_type&as_of="} {
			code, body := b.do(t, http.MethodGet, path+url.QueryEscape(mark), "")
			if code != http.StatusBadRequest || !strings.Contains(body, "as_of") {
				t.Errorf("GET %s%q: %d %s; want 400 naming as_of", path, mark, code, body)
			}
		}
		for _, action := range []string{"replay", "purge"} {
			code, body := b.do(t, http.MethodPost, "/api/dead-letters/"+action+"?reason=unknown_type&as_of="+url.QueryEscape(mark), "")
			if code != http.StatusBadRequest || !strings.Contains(body, "as_of") || strings.Contains(body, "<script>") {
				t.Errorf("POST %s as of %q: %d %s; want 400 naming as_of, the mark not echoed raw", action, mark, code, body)
			}
		}
		br := newBrowser(t, b)
		br.get("/dead-letters")
		resp, _ := br.post("/dead-letters/bulk", url.Values{"action": {"purge"}, "confirm": {"yes"}, "reason": {"unknown_type"}, "as_of": {mark}})
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("console purge as of %q: %d, want 400", mark, resp.StatusCode)
		}
	}
}

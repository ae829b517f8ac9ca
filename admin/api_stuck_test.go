package admin_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/idemhq/idem/admin"
)

// GET /api/sagas takes the stuck view's reason and idle filters, with the
// console's parameter names: a reason lists its sagas most urgent first,
// idle keeps those with no event for that long, and a bad value, or a
// filter the reason's list cannot apply, is a 400 that says what to change.
func TestAPIStuckFilters(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	stuckFixture(t, b)
	keys := func(path string) []string {
		t.Helper()
		var list admin.SagaList
		b.getJSON(t, path, &list)
		out := make([]string, 0, len(list.Sagas))
		for _, s := range list.Sagas {
			out = append(out, s.Key)
		}
		return out
	}
	for reason, want := range map[string]string{"deadline": "o-3", "retrying": "o-1", "timer": "x-9 o-2"} {
		if got := strings.Join(keys("/api/sagas?stuck=true&type=order&reason="+reason), " "); got != want {
			t.Errorf("GET /api/sagas reason=%s: sagas %q, want %q (most overdue first)", reason, got, want)
		}
	}
	if got := keys("/api/sagas?stuck=true&type=order&idle=1000h"); len(got) != 0 {
		t.Errorf("GET /api/sagas idle=1000h: sagas %q, want none", got)
	}
	if got := keys("/api/sagas?stuck=true&type=order&reason=idle&idle=1ns"); len(got) < 4 {
		t.Errorf("GET /api/sagas reason=idle idle=1ns: sagas %q, want every active one", got)
	}
	for _, bad := range []string{"stuck=true&reason=nosuch", "stuck=true&idle=soon", "stuck=true&idle=-1h",
		"reason=deadline", "idle=1h", "stuck=true&reason=deadline&prefix=o-", "stuck=true&reason=timer&idle=1h",
		"stuck=true&reason=%3Cscript%3E%00%FF", "stuck=true&idle=%3Cscript%3E%00%FF"} {
		if code, body := b.do(t, http.MethodGet, "/api/sagas?"+bad, ""); code != http.StatusBadRequest || !json.Valid([]byte(body)) || strings.Contains(body, "\x00") {
			t.Errorf("GET /api/sagas?%s: %d %.200s, want 400", bad, code, body)
		}
	}
}

package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
)

// hostileLimit is a limit name and hostileTenant a key that a page must
// show as text.
const (
	hostileLimit  = `<script>alert("limit")</script>`
	hostileTenant = `<img src=x onerror=alert("key")>`
)

// limiterOf returns b's store as a store.Limiter.
func limiterOf(t *testing.T, b *bundle) store.Limiter {
	t.Helper()
	lim, ok := any(b.st).(store.Limiter)
	if !ok {
		t.Fatalf("store %T is no store.Limiter", b.st)
	}
	return lim
}

// seedLimits declares parser-api (2 at once, 20/s, burst 5, keyed by
// tenant) and the hostile limit (1 at once), and admits two messages of
// tenant-a and one of the hostile tenant under parser-api, held for an
// hour.
func seedLimits(t *testing.T, lim store.Limiter) {
	t.Helper()
	ctx := context.Background()
	decl := []store.Limit{{Name: "parser-api", Concurrency: 2, Rate: 20, Burst: 5}, {Name: hostileLimit, Concurrency: 1}}
	if err := lim.DeclareLimits(ctx, decl); err != nil {
		t.Fatal(err)
	}
	key := func(k string) []store.LimitKey { return []store.LimitKey{{Name: "parser-api", Key: k}} }
	in := map[string]store.Limit{"parser-api": decl[0], hostileLimit: decl[1]}
	got, err := lim.Admit(ctx, &store.AdmitParams{Limits: in, TTL: time.Hour, Requests: []store.AdmitRequest{
		{Holder: "h-1", Keys: key("tenant-a")}, {Holder: "h-2", Keys: key("tenant-a")}, {Holder: "h-3", Keys: key(hostileTenant)}}})
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range got {
		if !a.Admitted {
			t.Fatalf("request %d refused: %+v", i, a)
		}
	}
}

// findLimit returns the limit named name in list, failing without it.
func findLimit(t *testing.T, list admin.LimitList, name string) admin.Limit {
	t.Helper()
	for _, l := range list.Limits {
		if l.Name == name {
			return l
		}
	}
	t.Fatalf("no limit %q in %+v", name, list)
	return admin.Limit{}
}

func valuesOf(v *admin.LimitValues) string {
	if v == nil {
		return "null"
	}
	b, _ := json.Marshal(admin.LimitValues{Concurrency: v.Concurrency, Rate: v.Rate, Burst: v.Burst})
	return string(b)
}

// GET /api/limits shows each limit's declaration, override, values in
// force and counters; POST sets an override from the values in force,
// and .../reset removes it.
func TestAPILimits(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	lim := limiterOf(t, b)
	seedLimits(t, lim)

	var list admin.LimitList
	b.getJSON(t, "/api/limits", &list)
	p := findLimit(t, list, "parser-api")
	want := `{"concurrency":2,"rate":20,"burst":5}`
	if valuesOf(p.Declared) != want || p.Override != nil || valuesOf(p.InForce) != want || p.Declared.UpdatedAt.IsZero() {
		t.Errorf("parser-api declared %s, override %s, in force %s: want %s, none, %s", valuesOf(p.Declared), valuesOf(p.Override), valuesOf(p.InForce), want, want)
	}
	if p.InFlight != 3 || p.CounterCount != 2 || len(p.Counters) != 2 || p.Counters[0] != (admin.LimitCounter{Key: "tenant-a", InFlight: 2, Tokens: p.Counters[0].Tokens}) || p.Counters[1].Key != hostileTenant {
		t.Errorf("parser-api use: in flight %d over %d counters %+v, want 3 over tenant-a (2) and the hostile tenant (1)", p.InFlight, p.CounterCount, p.Counters)
	}
	if tok := p.Counters[0].Tokens; tok < 2.9 || tok > 5 {
		t.Errorf("tenant-a's bucket holds %v tokens, want about 3 (burst 5, two taken)", tok)
	}
	b.getJSON(t, "/api/limits?keys=1", &list)
	if p := findLimit(t, list, "parser-api"); len(p.Counters) != 1 || p.CounterCount != 2 || p.InFlight != 3 {
		t.Errorf("keys=1: %+v, want the busiest counter of 2, and in flight over all", p)
	}

	code, body := b.do(t, http.MethodPost, "/api/limits/parser-api", `{"concurrency": 3}`, admin.ActorHeader, "alice")
	var got admin.Limit
	if code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("set concurrency 3: %d %s", code, body)
	}
	if want := `{"concurrency":3,"rate":20,"burst":5}`; valuesOf(got.Override) != want || valuesOf(got.InForce) != want || got.InFlight != 3 {
		t.Errorf("after set: override %s, in force %s, in flight %d: want %s for both, 3 in flight", valuesOf(got.Override), valuesOf(got.InForce), got.InFlight, want)
	}
	over, err := lim.Limits(context.Background())
	if err != nil || len(over) != 1 || over[0].Concurrency != 3 || over[0].Rate != 20 || over[0].Burst != 5 {
		t.Errorf("the store's overrides after set: %+v %v", over, err)
	}

	// A second set replaces the override whole: what it leaves out is the
	// declared value again, as with idem limits set.
	if code, body = b.do(t, http.MethodPost, "/api/limits/parser-api", `{"rate": 2.5, "burst": 0}`); code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("set rate 2.5: %d %s", code, body)
	}
	if want := `{"concurrency":2,"rate":2.5,"burst":0}`; valuesOf(got.Override) != want || valuesOf(got.InForce) != want {
		t.Errorf("after a second set: override %s, in force %s: want %s for both (the declared cap, not the first override's)", valuesOf(got.Override), valuesOf(got.InForce), want)
	}

	if code, body = b.do(t, http.MethodPost, "/api/limits/parser-api/reset", ""); code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("reset: %d %s", code, body)
	}
	if got.Override != nil || valuesOf(got.InForce) != want {
		t.Errorf("after reset: override %s, in force %s: want none, the declaration %s", valuesOf(got.Override), valuesOf(got.InForce), want)
	}

	// A name nobody declared is refused unless asked for; then it has an
	// override and nothing in force.
	if code, body := b.do(t, http.MethodPost, "/api/limits/parser_api", `{"concurrency": 1}`); code != http.StatusNotFound || !strings.Contains(body, "undeclared=true") {
		t.Errorf("set of an undeclared name: %d %s, want 404 naming undeclared=true", code, body)
	}
	if code, body = b.do(t, http.MethodPost, "/api/limits/later?undeclared=true", `{"concurrency": 1}`); code != http.StatusOK || json.Unmarshal([]byte(body), &got) != nil {
		t.Fatalf("set of an undeclared name with undeclared=true: %d %s", code, body)
	}
	if valuesOf(got.Override) != `{"concurrency":1,"rate":0,"burst":0}` || got.InForce != nil || got.Declared != nil {
		t.Errorf("an undeclared override: %s", body)
	}
}

// Bad changes are 400s that name the field, in JSON; unknown names 404;
// cross-site, read-only and capability-less requests as elsewhere.
func TestAPILimitsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seedLimits(t, limiterOf(t, b))
	for _, c := range []struct{ path, body, field string }{
		{"/api/limits/parser-api", `{"concurrency": -1}`, "concurrency"},
		{"/api/limits/parser-api", `{"rate": -0.5}`, "rate"},
		{"/api/limits/parser-api", `{"burst": -2}`, "burst"},
		{"/api/limits/parser-api", `{"rate": "fast"}`, "rate"},
		{"/api/limits/parser-api", `{"concurency": 2}`, "concurency"},
		{"/api/limits/parser-api", `{}`, "concurrency, rate and burst"},
		{"/api/limits/parser-api", `not json`, "request body"},
		{"/api/limits/a%00b", `{"concurrency": 1}`, "name"},
		{"/api/limits/a%FFb", `{"concurrency": 1}`, "name"},
		{"/api/limits/a%00b/reset", ``, "name"},
		{"/api/limits/" + strings.Repeat("n", 201), `{"concurrency": 1}`, "name"},
		{"/api/limits/parser-api?undeclared=yes", `{"concurrency": 1}`, "undeclared"},
	} {
		code, body := b.do(t, http.MethodPost, c.path, c.body)
		var e struct{ Error string }
		if code != http.StatusBadRequest || json.Unmarshal([]byte(body), &e) != nil || !strings.Contains(e.Error, c.field) {
			t.Errorf("POST %s %s: %d %s, want 400 naming %s", c.path, c.body, code, body, c.field)
		}
		if strings.ContainsRune(body, 0) {
			t.Errorf("POST %s: the answer holds a raw NUL: %q", c.path, body)
		}
	}
	if code, body := b.do(t, http.MethodGet, "/api/limits?keys=-1", ""); code != http.StatusBadRequest || !strings.Contains(body, "keys") {
		t.Errorf("GET keys=-1: %d %s, want 400 naming keys", code, body)
	}
	if code, body := b.do(t, http.MethodPost, "/api/limits/missing/reset", ""); code != http.StatusNotFound {
		t.Errorf("reset of an unknown limit: %d %s, want 404", code, body)
	}
	if code, _ := b.do(t, http.MethodPost, "/api/limits/parser-api", `{"concurrency": 9}`, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("cross-site set: %d, want 403", code)
	}
	if code, _ := b.do(t, http.MethodPost, "/api/limits/parser-api", `{"concurrency": 9}`, admin.ActorHeader, strings.Repeat("a", 101)); code != http.StatusBadRequest {
		t.Errorf("set with a 101-byte actor: %d, want 400", code)
	}
	if over, err := limiterOf(t, b).Limits(context.Background()); err != nil || len(over) != 0 {
		t.Errorf("after refused changes the store holds overrides %+v %v, want none", over, err)
	}

	ro := setup(t, &admin.Config{ReadOnly: true})
	seedLimits(t, limiterOf(t, ro))
	for _, path := range []string{"/api/limits/parser-api", "/api/limits/parser-api/reset"} {
		if code, _ := ro.do(t, http.MethodPost, path, `{"concurrency": 9}`); code != http.StatusForbidden {
			t.Errorf("read-only POST %s: %d, want 403", path, code)
		}
	}

	h, err := admin.New(b.e, hiddenReplicas{memstore.New(nil)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*http.Request{httptest.NewRequest(http.MethodGet, "http://127.0.0.1/api/limits", nil),
		httptest.NewRequest(http.MethodPost, "http://127.0.0.1/api/limits/parser-api", strings.NewReader(`{"concurrency": 1}`))} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusNotImplemented || !strings.Contains(rec.Body.String(), "keeps no flow-control limits") {
			t.Errorf("%s %s on a store without limits: %d %s, want 501", r.Method, r.URL.Path, rec.Code, rec.Body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/limits", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "keeps no flow-control limits") {
		t.Errorf("GET /limits on a store without limits: %d, want 200 saying so:\n%s", rec.Code, rec.Body)
	}
}

// GET /api/limits and the Limits page list the shares of the store's fair
// queue with the messages they have waiting, the busiest first, hostile
// fairness keys as text.
func TestLimitsShowWaitingShares(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, e, logger := fairSQLiteEngine(t, nil) // not started: the messages wait
	var envs []idem.Envelope
	for i, share := range []string{"acme", "acme", hostileTenant} {
		envs = append(envs, idem.Envelope{ID: fmt.Sprint("m-", i), Type: "t", Headers: map[string]string{transport.HeaderFairnessKey: share}})
	}
	if err := st.Publish(ctx, envs); err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(e, st, &admin.Config{Logger: logger, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return string(body)
	}
	var list admin.LimitList
	if err := json.Unmarshal([]byte(get("/api/limits")), &list); err != nil {
		t.Fatal(err)
	}
	want := []store.ShareWaiting{{Share: "acme", Waiting: 2}, {Share: hostileTenant, Waiting: 1}}
	if !slices.Equal(list.Shares, want) || list.SharesTotal != 2 {
		t.Fatalf("GET /api/limits: shares %+v of %d, want %+v of 2", list.Shares, list.SharesTotal, want)
	}
	page := get("/limits")
	if strings.Contains(page, hostileTenant) || !strings.Contains(page, `data-share="acme"`) || !strings.Contains(page, "&lt;img src=x onerror=alert(&#34;key&#34;)&gt;") {
		t.Fatalf("the Limits page's shares: want acme and the hostile key as text:\n%s", page)
	}
}

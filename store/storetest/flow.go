package storetest

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// The Flow cases check store.Limiter: concurrency caps and rate limits
// kept in the store and admitted across every connection that shares it.

var limiterIface = implements[store.Limiter]("store.Limiter")

// flowCases are run when the store implements store.Limiter.
var flowCases = []testCase{
	{"FlowCap", testFlowCap},
	{"FlowAllOrNone", testFlowAllOrNone},
	{"FlowRate", testFlowRate},
	{"FlowExpiry", testFlowExpiry},
	{"FlowLimitLoweredWhileHeld", testFlowLimitLoweredWhileHeld},
	{"FlowLimitResetWhileHeld", testFlowLimitResetWhileHeld},
	{"FlowConcurrentNeverOverCap", testFlowConcurrentNeverOverCap},
	{"FlowReleaseInCommit", testFlowReleaseInCommit},
	{"FlowLimitsKept", testFlowLimitsKept},
	{"FlowHostileNamesAndKeys", testFlowHostileNamesAndKeys},
	{"FlowDeclaredKept", testFlowDeclaredKept},
	{"FlowDeclaredApartFromOverrides", testFlowDeclaredApartFromOverrides},
	{"FlowDeclaredRefusedWhole", testFlowDeclaredRefusedWhole},
	{"FlowDeclaredHostileNames", testFlowDeclaredHostileNames},
	{"FlowDeclaredRefillsUses", testFlowDeclaredRefillsUses},
}

// flowTTL is a hold's lifetime where a case needs it to outlive the case.
const flowTTL = time.Minute

func limiterOf(t *testing.T, s store.Store) store.Limiter {
	t.Helper()
	l, ok := s.(store.Limiter)
	if !ok {
		t.Fatalf("%T is not a store.Limiter", s)
	}
	return l
}

// lk is the counter name/key.
func lk(name, key string) store.LimitKey { return store.LimitKey{Name: name, Key: key} }

// limits returns a Limits map of ls.
func limits(ls ...store.Limit) map[string]store.Limit {
	m := map[string]store.Limit{}
	for _, l := range ls {
		m[l.Name] = l
	}
	return m
}

// req is a request of holder for keys.
func req(holder string, keys ...store.LimitKey) store.AdmitRequest {
	return store.AdmitRequest{Holder: holder, Keys: keys}
}

// admitAll calls Admit and fails the test on error.
func admitAll(t *testing.T, l store.Limiter, lim map[string]store.Limit, ttl time.Duration, reqs ...store.AdmitRequest) []store.Admission {
	t.Helper()
	got, err := l.Admit(t.Context(), &store.AdmitParams{Limits: lim, Requests: reqs, TTL: ttl})
	if err != nil {
		t.Fatalf("admit: got error %v, want nil", err)
	}
	if len(got) != len(reqs) {
		t.Fatalf("admit %d requests: got %d admissions", len(reqs), len(got))
	}
	return got
}

// admitted returns which admissions were admitted, as a string of 0 and 1.
func admitted(as []store.Admission) string {
	var b strings.Builder
	for _, a := range as {
		if a.Admitted {
			b.WriteByte('1')
		} else {
			b.WriteByte('0')
		}
	}
	return b.String()
}

func wantAdmitted(t *testing.T, what string, as []store.Admission, want string) {
	t.Helper()
	if got := admitted(as); got != want {
		t.Fatalf("%s: admitted %s, want %s (%+v)", what, got, want, as)
	}
}

func release(t *testing.T, l store.Limiter, holders ...string) {
	t.Helper()
	if err := l.ReleaseHolds(t.Context(), holders); err != nil {
		t.Fatalf("release holds %q: got error %v, want nil", holders, err)
	}
}

// inFlight returns LimitUses' in-flight count of k (0 when it lists none)
// and fails on a negative count anywhere.
func inFlight(t *testing.T, l store.Limiter, k store.LimitKey) int {
	t.Helper()
	uses, err := l.LimitUses(t.Context())
	if err != nil {
		t.Fatalf("limit uses: got error %v, want nil", err)
	}
	n := 0
	for i, u := range uses {
		if u.InFlight < 0 || u.Tokens < 0 {
			t.Fatalf("limit uses: %+v is negative", u)
		}
		if i > 0 && uses[i-1].LimitKey.Compare(u.LimitKey) >= 0 {
			t.Fatalf("limit uses: %+v listed after %+v, want (Name, Key) order", u, uses[i-1])
		}
		if u.LimitKey == k {
			n = u.InFlight
		}
	}
	return n
}

func testFlowCap(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	api := lk("api", "")
	lim := limits(store.Limit{Name: "api", Concurrency: 2})
	got := admitAll(t, l, lim, flowTTL, req("h1", api), req("h2", api), req("h3", api), req("h4", api), req("h5", api))
	wantAdmitted(t, "5 requests under a cap of 2", got, "11000")
	if r := got[2]; r.Refused != api || r.Wait != 0 {
		t.Errorf("refusal by a cap: got Refused %+v Wait %v, want %+v and 0", r.Refused, r.Wait, api)
	}
	if n := inFlight(t, l, api); n != 2 {
		t.Errorf("in flight after 2 admitted: got %d, want 2", n)
	}
	release(t, l, "h1")
	wantAdmitted(t, "after one release", admitAll(t, l, lim, flowTTL, req("h6", api), req("h7", api)), "10")
	// A key of its own is a counter of its own; an unlimited name admits.
	wantAdmitted(t, "other key, unlimited name", admitAll(t, l, lim, flowTTL, req("h8", lk("api", "t2")), req("h9", lk("free", ""))), "11")
	if n := inFlight(t, l, api); n != 2 {
		t.Errorf("in flight: got %d, want 2", n)
	}
}

func testFlowAllOrNone(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	a, b, r := lk("a", ""), lk("b", ""), lk("r", "")
	lim := limits(store.Limit{Name: "a", Concurrency: 1}, store.Limit{Name: "b", Concurrency: 1}, store.Limit{Name: "r", Rate: 0.001, Burst: 1})
	got := admitAll(t, l, lim, flowTTL, req("x", a), req("y", b, a, r), req("z", b), req("w", r))
	// y needs a, which x holds: it takes neither b nor r's only token.
	wantAdmitted(t, "x on a, y on b+a+r, z on b, w on r", got, "1011")
	if got[1].Refused != a {
		t.Errorf("y refused by %+v, want %+v", got[1].Refused, a)
	}
	if n := inFlight(t, l, b); n != 1 {
		t.Errorf("b in flight: got %d, want 1 (z only)", n)
	}
}

func testFlowRate(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	r := lk("rate", "")
	lim := limits(store.Limit{Name: "rate", Rate: 10, Burst: 2})
	got := admitAll(t, l, lim, flowTTL, req("h1", r), req("h2", r), req("h3", r))
	wantAdmitted(t, "3 at once under 10/s burst 2", got, "110")
	if w := got[2].Wait; w <= 0 || w > 100*time.Millisecond || got[2].Refused != r {
		t.Fatalf("refusal by a rate of 10/s: got Refused %+v Wait %v, want %+v and 0 < Wait <= 100ms", got[2].Refused, w, r)
	}
	if n := inFlight(t, l, r); n != 0 {
		t.Errorf("a rate holds no slot: in flight %d, want 0", n)
	}
	deadline := time.Now().Add(promptWait)
	wait := got[2].Wait
	for i := 0; ; i++ {
		time.Sleep(wait) // the condition: the refusal's own wait has passed
		a := admitAll(t, l, lim, flowTTL, req(fmt.Sprintf("h3-%d", i), r))[0]
		if a.Admitted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still refused %v after the first wait of %v", promptWait, got[2].Wait)
		}
		wait = a.Wait
	}
}

func testFlowExpiry(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	a, b := lk("a", ""), lk("b", "")
	lim := limits(store.Limit{Name: "a", Concurrency: 1}, store.Limit{Name: "b", Concurrency: 1})
	ttl := 300 * time.Millisecond
	wantAdmitted(t, "short holds", admitAll(t, l, lim, ttl, req("ha", a), req("hb", b)), "11")
	if err := l.ExtendHolds(t.Context(), []string{"hb"}, flowTTL); err != nil {
		t.Fatalf("extend holds: got error %v, want nil", err)
	}
	deadline := time.Now().Add(promptWait)
	for i := 0; ; i++ {
		if admitAll(t, l, lim, flowTTL, req(fmt.Sprintf("ha2-%d", i), a))[0].Admitted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a hold of %v not extended still counts after %v", ttl, promptWait)
		}
		time.Sleep(ttl / 10)
	}
	if inFlight(t, l, b) != 1 {
		t.Errorf("b: the extended hold is gone")
	}
	wantAdmitted(t, "b while its extended hold lives", admitAll(t, l, lim, flowTTL, req("hb2", b)), "0")
	// Extending an expired hold does not bring it back.
	if err := l.ExtendHolds(t.Context(), []string{"ha"}, flowTTL); err != nil {
		t.Fatalf("extend an expired hold: got error %v, want nil", err)
	}
	if n := inFlight(t, l, a); n != 1 {
		t.Errorf("a in flight after extending its expired hold: got %d, want 1", n)
	}
}

func testFlowLimitLoweredWhileHeld(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	k := lk("api", "")
	two := limits(store.Limit{Name: "api", Concurrency: 2})
	wantAdmitted(t, "cap 2", admitAll(t, l, two, flowTTL, req("h1", k), req("h2", k)), "11")
	if err := l.SetLimit(t.Context(), store.Limit{Name: "api", Concurrency: 1}); err != nil {
		t.Fatalf("set limit: got error %v, want nil", err)
	}
	one := limits(store.Limit{Name: "api", Concurrency: 1})
	wantAdmitted(t, "cap lowered to 1 with 2 held", admitAll(t, l, one, flowTTL, req("h3", k)), "0")
	release(t, l, "h1")
	wantAdmitted(t, "cap 1 with 1 held", admitAll(t, l, one, flowTTL, req("h4", k)), "0")
	release(t, l, "h2")
	wantAdmitted(t, "cap 1 with none held", admitAll(t, l, one, flowTTL, req("h5", k), req("h6", k)), "10")
}

func testFlowLimitResetWhileHeld(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	k := lk("api", "")
	if err := l.SetLimit(t.Context(), store.Limit{Name: "api", Concurrency: 2}); err != nil {
		t.Fatalf("set limit: got error %v, want nil", err)
	}
	two := limits(store.Limit{Name: "api", Concurrency: 2})
	wantAdmitted(t, "cap 2", admitAll(t, l, two, flowTTL, req("h1", k), req("h2", k)), "11")
	for range 2 { // resetting twice is not an error
		if err := l.ResetLimit(t.Context(), "api"); err != nil {
			t.Fatalf("reset limit: got error %v, want nil", err)
		}
	}
	if ls, err := l.Limits(t.Context()); err != nil || len(ls) != 0 {
		t.Fatalf("limits after reset: got %+v, %v, want none", ls, err)
	}
	// Without a limit the counter is unlimited; the holds are still released.
	wantAdmitted(t, "no limit", admitAll(t, l, nil, flowTTL, req("h3", k)), "1")
	release(t, l, "h1", "h2", "h1", "unknown")
	if n := inFlight(t, l, k); n != 0 {
		t.Errorf("in flight after releasing every hold: got %d, want 0", n)
	}
	one := limits(store.Limit{Name: "api", Concurrency: 1})
	wantAdmitted(t, "a cap again", admitAll(t, l, one, flowTTL, req("h4", k), req("h5", k)), "10")
}

func testFlowConcurrentNeverOverCap(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	const workers, rounds, cap3 = 8, 50, 3
	k := lk("api", "")
	lim := limits(store.Limit{Name: "api", Concurrency: cap3})
	var live, peak, admits atomic.Int64
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- flowWorker(t, l, lim, k, w, rounds, &live, &peak, &admits)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if p := peak.Load(); p > cap3 {
		t.Errorf("peak in flight: got %d, want at most %d", p, cap3)
	}
	if admits.Load() == 0 {
		t.Error("no request admitted in 400")
	}
	if n := inFlight(t, l, k); n != 0 {
		t.Errorf("in flight after every release: got %d, want 0", n)
	}
	t.Logf("%d of %d admitted, peak %d", admits.Load(), workers*rounds, peak.Load())
}

// flowWorker admits rounds requests one by one; each admitted one counts
// in live while it holds, then releases.
func flowWorker(t *testing.T, l store.Limiter, lim map[string]store.Limit, k store.LimitKey, w, rounds int, live, peak, admits *atomic.Int64) error {
	for i := range rounds {
		holder := fmt.Sprintf("w%d-%d", w, i)
		got, err := l.Admit(t.Context(), &store.AdmitParams{Limits: lim, Requests: []store.AdmitRequest{req(holder, k)}, TTL: flowTTL})
		if err != nil {
			return fmt.Errorf("admit %s: %w", holder, err)
		}
		if !got[0].Admitted {
			continue
		}
		admits.Add(1)
		n := live.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		// Hold across a round trip of the store, so that other workers
		// admit while this one holds; the store must count it too.
		uses, err := l.LimitUses(t.Context())
		if err != nil {
			return fmt.Errorf("limit uses: %w", err)
		}
		for _, u := range uses {
			if u.LimitKey == k && u.InFlight > lim[k.Name].Concurrency {
				return fmt.Errorf("limit uses: %d in flight, over the cap of %d", u.InFlight, lim[k.Name].Concurrency)
			}
		}
		live.Add(-1)
		if err := l.ReleaseHolds(t.Context(), []string{holder}); err != nil {
			return fmt.Errorf("release %s: %w", holder, err)
		}
	}
	return nil
}

func testFlowReleaseInCommit(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	k := lk("api", "")
	one := limits(store.Limit{Name: "api", Concurrency: 1})
	wantAdmitted(t, "cap 1", admitAll(t, l, one, flowTTL, req("h1", k)), "1")
	uow := begin(t, s)
	if err := uow.Rollback(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A commit that fails releases nothing.
	missing := newInstance("order", "missing", now())
	err := tryCommit(t, s, &store.Changes{Updates: []*store.Instance{missing}, ReleaseHolds: []string{"h1"}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("commit updating a missing instance: got %v, want ErrConflict", err)
	}
	wantAdmitted(t, "after a failed commit", admitAll(t, l, one, flowTTL, req("h2", k)), "0")
	commit(t, s, &store.Changes{ReleaseHolds: []string{"h1"}})
	wantAdmitted(t, "after a commit releasing h1", admitAll(t, l, one, flowTTL, req("h3", k)), "1")
}

func testFlowLimitsKept(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	ctx := t.Context()
	before := now().Add(-time.Second)
	for _, lim := range []store.Limit{{Name: "b", Rate: 2.5, Burst: 5}, {Name: "a", Concurrency: 3}, {Name: "b", Concurrency: 7}} {
		if err := l.SetLimit(ctx, lim); err != nil {
			t.Fatalf("set limit %+v: got error %v, want nil", lim, err)
		}
	}
	got, err := l.Limits(ctx)
	if err != nil {
		t.Fatalf("limits: got error %v, want nil", err)
	}
	want := []store.Limit{{Name: "a", Concurrency: 3}, {Name: "b", Concurrency: 7}}
	if len(got) != len(want) {
		t.Fatalf("limits: got %+v, want %+v", got, want)
	}
	for i := range got {
		if got[i].UpdatedAt.Before(before) {
			t.Errorf("limit %s: UpdatedAt %v not set", got[i].Name, got[i].UpdatedAt)
		}
		got[i].UpdatedAt = time.Time{}
		if got[i] != want[i] {
			t.Errorf("limit %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, bad := range []store.Limit{
		{Name: "x", Concurrency: -1}, {Name: "x", Rate: -1}, {Name: "x", Rate: math.NaN()},
		{Name: "x", Rate: math.Inf(1)}, {Name: "x", Burst: -1}, {Name: ""},
	} {
		if err := l.SetLimit(ctx, bad); !errors.Is(err, store.ErrRejected) {
			t.Errorf("set limit %+v: got error %v, want ErrRejected", bad, err)
		}
	}
}

func testFlowHostileNamesAndKeys(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	ctx := t.Context()
	script := `<script>alert("x")</script>`
	for _, bad := range []string{"a\x00b", "a\xffb", strings.Repeat("n", store.MaxLimitName+1)} {
		if err := l.SetLimit(ctx, store.Limit{Name: bad, Concurrency: 1}); !errors.Is(err, store.ErrRejected) {
			t.Errorf("set limit named %q: got error %v, want ErrRejected", bad, err)
		}
		_, err := l.Admit(ctx, &store.AdmitParams{Limits: limits(store.Limit{Name: "api", Concurrency: 1}), Requests: []store.AdmitRequest{req("h", lk("api", bad))}, TTL: flowTTL})
		if !errors.Is(err, store.ErrRejected) {
			t.Errorf("admit with key %q: got error %v, want ErrRejected", bad, err)
		}
	}
	if err := l.SetLimit(ctx, store.Limit{Name: script, Concurrency: 1}); err != nil {
		t.Fatalf("set limit named %q: got error %v, want nil", script, err)
	}
	if ls, err := l.Limits(ctx); err != nil || len(ls) != 1 || ls[0].Name != script {
		t.Errorf("limits: got %+v, %v, want one named %q", ls, err, script)
	}
	k := lk(script, "tenant "+script+" é")
	lim := limits(store.Limit{Name: script, Concurrency: 1})
	wantAdmitted(t, "hostile key", admitAll(t, l, lim, flowTTL, req(script, k), req("h2", k)), "10")
	if n := inFlight(t, l, k); n != 1 {
		t.Errorf("in flight of %+v: got %d, want 1 (the key kept intact)", k, n)
	}
	release(t, l, script)
	if n := inFlight(t, l, k); n != 0 {
		t.Errorf("in flight after release: got %d, want 0", n)
	}
}

package storetest

import (
	"math"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// The FlowSweep cases check store.Limiter.SweepCounters: a counter that
// no decision needs (no live hold, a full bucket or none, idle) is
// deleted, in bounded batches, and deleting it changes no decision;
// expired holds are deleted too.

func init() {
	flowCases = append(flowCases,
		testCase{"FlowSweepFullIdleCounters", testFlowSweepFullIdleCounters},
		testCase{"FlowSweepKeepsPartialAndHeld", testFlowSweepKeepsPartialAndHeld},
		testCase{"FlowSweepExpiredHolds", testFlowSweepExpiredHolds},
		testCase{"FlowSweepRefusesBadParams", testFlowSweepRefusesBadParams},
	)
}

// sweepPass sweeps with idle in batches of limit until a batch says
// nothing is left, checking each batch's bounds, and returns the totals.
func sweepPass(t *testing.T, l store.Limiter, idle time.Duration, limit int) store.CounterSweep {
	t.Helper()
	var total store.CounterSweep
	p := &store.CounterSweepParams{Idle: idle, Limit: limit}
	for calls := 1; ; calls++ {
		r, err := l.SweepCounters(t.Context(), p)
		if err != nil {
			t.Fatalf("sweep counters (batch %d): got error %v, want nil", calls, err)
		}
		if r.Counters > limit || r.Holds > limit {
			t.Fatalf("sweep counters with Limit %d: deleted %d counters and %d holds in one call", limit, r.Counters, r.Holds)
		}
		if r.Next != nil && p.After != nil && *r.Next == *p.After {
			t.Fatalf("sweep counters: Next %+v did not move past After", *r.Next)
		}
		total.Counters += r.Counters
		total.Holds += r.Holds
		if r.Next == nil && r.Holds < limit {
			return total
		}
		if calls > 1000 {
			t.Fatalf("sweep counters: no end after %d batches", calls)
		}
		p.After = r.Next
	}
}

// usesOf returns LimitUses by counter.
func usesOf(t *testing.T, l store.Limiter) map[store.LimitKey]store.LimitUse {
	t.Helper()
	uses, err := l.LimitUses(t.Context())
	if err != nil {
		t.Fatalf("limit uses: got error %v, want nil", err)
	}
	m := map[store.LimitKey]store.LimitUse{}
	for _, u := range uses {
		m[u.LimitKey] = u
	}
	return m
}

func setLimits(t *testing.T, l store.Limiter, lim map[string]store.Limit) {
	t.Helper()
	for _, v := range lim {
		if err := l.SetLimit(t.Context(), v); err != nil {
			t.Fatalf("set limit %q: %v", v.Name, err)
		}
	}
}

// testFlowSweepFullIdleCounters takes a token of five counters of a fast
// rate, so that their buckets are full again a few milliseconds later:
// a sweep whose Idle they have not outlived keeps them; one with Idle 0
// deletes them all, in batches of 2; and a swept counter admits as a full
// one does (2 of 3 with a Burst of 2).
func testFlowSweepFullIdleCounters(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	lim := limits(store.Limit{Name: "fast", Rate: 1000, Burst: 2})
	setLimits(t, l, lim)
	keys := []string{"t-1", "t-2", "t-3", "t-4", "t-5"}
	for _, k := range keys {
		wantAdmitted(t, "a token of "+k, admitAll(t, l, lim, flowTTL, req("h-"+k, lk("fast", k))), "1")
	}
	if got := sweepPass(t, l, time.Hour, 2); got.Counters != 0 {
		t.Fatalf("sweep with Idle 1h right after their admissions: deleted %d counters, want 0", got.Counters)
	}
	if n := len(usesOf(t, l)); n != len(keys) {
		t.Fatalf("limit uses after a sweep that deleted none: got %d counters, want %d", n, len(keys))
	}
	deadline := time.Now().Add(promptWait)
	for swept := 0; swept < len(keys); {
		swept += sweepPass(t, l, 0, 2).Counters
		if swept > len(keys) {
			t.Fatalf("sweep deleted %d counters, but there are %d", swept, len(keys))
		}
		if swept < len(keys) && time.Now().After(deadline) {
			t.Fatalf("sweep with Idle 0: deleted %d of %d full counters within %v", swept, len(keys), promptWait)
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	if uses := usesOf(t, l); len(uses) != 0 {
		t.Fatalf("limit uses after the sweep: got %v, want none", uses)
	}
	reqs := []store.AdmitRequest{req("a-1", lk("fast", "t-1")), req("a-2", lk("fast", "t-1")), req("a-3", lk("fast", "t-1"))}
	wantAdmitted(t, "a swept counter, burst 2", admitAll(t, l, lim, flowTTL, reqs...), "110")
}

// testFlowSweepKeepsPartialAndHeld checks that a sweep keeps a counter
// whose bucket is not full (a rate of one token in 1000 s) and one with a
// live hold (whose bucket, of a fast rate, is full), and neither loses
// its state: the partial bucket still admits only what it holds.
func testFlowSweepKeepsPartialAndHeld(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	lim := limits(store.Limit{Name: "slow", Rate: 0.001, Burst: 3}, store.Limit{Name: "held", Concurrency: 2, Rate: 1000, Burst: 1})
	setLimits(t, l, lim)
	wantAdmitted(t, "a slow token", admitAll(t, l, lim, flowTTL, req("h-1", lk("slow", "a"))), "1")
	wantAdmitted(t, "a held slot", admitAll(t, l, lim, flowTTL, req("h-2", lk("held", "b"))), "1")
	deadline := time.Now().Add(promptWait)
	for usesOf(t, l)[lk("held", "b")].Tokens < 1-1e-6 {
		if time.Now().After(deadline) {
			t.Fatalf("held/b's bucket is not full again within %v", promptWait)
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	if got := sweepPass(t, l, 0, 10); got.Counters != 0 {
		t.Fatalf("sweep: deleted %d counters, want 0 (a partial bucket, a live hold)", got.Counters)
	}
	uses := usesOf(t, l)
	if u := uses[lk("held", "b")]; u.InFlight != 1 || math.Abs(u.Tokens-1) > 1e-6 {
		t.Errorf("held/b after the sweep: got %+v, want 1 in flight and its full bucket of 1 token kept", u)
	}
	if u := uses[lk("slow", "a")]; u.Tokens < 2-1e-3 || u.Tokens > 2+1e-3 {
		t.Errorf("slow/a after the sweep: got %+v, want its 2 tokens left", u)
	}
	reqs := []store.AdmitRequest{req("a-1", lk("slow", "a")), req("a-2", lk("slow", "a")), req("a-3", lk("slow", "a"))}
	wantAdmitted(t, "the kept partial bucket of 2 tokens", admitAll(t, l, lim, flowTTL, reqs...), "110")
}

// testFlowSweepExpiredHolds checks that expired holds are deleted, at
// most Limit per call, and a live one is kept.
func testFlowSweepExpiredHolds(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	lim := limits(store.Limit{Name: "cap", Concurrency: 5})
	wantAdmitted(t, "a live hold", admitAll(t, l, lim, flowTTL, req("live", lk("cap", ""))), "1")
	const ttl = 50 * time.Millisecond
	wantAdmitted(t, "three short holds", admitAll(t, l, lim, ttl, req("e-1", lk("cap", "")), req("e-2", lk("cap", "")), req("e-3", lk("cap", ""))), "111")
	deadline := time.Now().Add(promptWait)
	for swept := 0; swept < 3; {
		swept += sweepPass(t, l, 0, 2).Holds
		if swept > 3 {
			t.Fatalf("sweep deleted %d holds, but 3 expired", swept)
		}
		if swept < 3 && time.Now().After(deadline) {
			t.Fatalf("sweep: deleted %d of 3 expired holds within %v", swept, promptWait)
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
	if n := inFlight(t, l, lk("cap", "")); n != 1 {
		t.Fatalf("in flight after the sweep: got %d, want 1 (the live hold)", n)
	}
	wantAdmitted(t, "4 more under a cap of 5", admitAll(t, l, lim, flowTTL, req("n-1", lk("cap", "")), req("n-2", lk("cap", "")), req("n-3", lk("cap", "")), req("n-4", lk("cap", "")), req("n-5", lk("cap", ""))), "11110")
}

func testFlowSweepRefusesBadParams(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	for _, p := range []*store.CounterSweepParams{nil, {Limit: 0}, {Limit: 1, Idle: -time.Second}} {
		if _, err := l.SweepCounters(t.Context(), p); err == nil {
			t.Errorf("sweep counters with %+v: got no error, want one", p)
		}
	}
}

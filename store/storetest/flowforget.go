package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// The FlowDeclaredForgotten case checks Limiter.ForgetDeclarations: a
// declaration no running engine refreshes goes once no counter of it is
// kept, an override and the holds taken under it stay, a drained bucket
// keeps its declaration (so the counter sweep never refills it as if it
// had no rate), and a later declaration brings one back.

func init() {
	flowCases = append(flowCases, testCase{"FlowDeclaredForgotten", testFlowDeclaredForgotten})
}

// forgetAge is the age past which the case forgets declarations: long
// enough that a declaration made just before the call is never that old,
// short enough for the case to wait it out.
const forgetAge = 400 * time.Millisecond

func testFlowDeclaredForgotten(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	ctx := t.Context()
	if _, err := l.ForgetDeclarations(ctx, 0); !errors.Is(err, store.ErrRejected) {
		t.Fatalf("forget declarations older than 0: got error %v, want one wrapping store.ErrRejected", err)
	}
	old := store.Limit{Name: "old", Concurrency: 1}
	drained := store.Limit{Name: "drained", Rate: 1.0 / 86400, Burst: 1}
	if err := l.DeclareLimits(ctx, []store.Limit{old, drained, {Name: "gone", Rate: 2}}); err != nil {
		t.Fatalf("declare limits: got error %v, want nil", err)
	}
	if err := l.SetLimit(ctx, store.Limit{Name: "old", Concurrency: 2}); err != nil {
		t.Fatalf("set limit: got error %v, want nil", err)
	}
	adm, err := l.Admit(ctx, &store.AdmitParams{Limits: limits(old, drained), TTL: flowTTL, Requests: []store.AdmitRequest{
		{Holder: "h1", Keys: []store.LimitKey{lk("old", "")}}, {Holder: "d1", Keys: []store.LimitKey{lk("drained", "")}}}})
	if err != nil || len(adm) != 2 || !adm[0].Admitted || !adm[1].Admitted {
		t.Fatalf("admit under old and drained: got %+v, %v, want both admitted", adm, err)
	}
	// Let the first declarations age past forgetAge (by every clock a
	// store may use), then declare "fresh": only "gone" goes, "old" and
	// "drained" having counters (a hold; a drained bucket).
	waitAtLeast(forgetAge + 300*time.Millisecond)
	if err := l.DeclareLimits(ctx, []store.Limit{{Name: "fresh", Concurrency: 4}}); err != nil {
		t.Fatalf("declare fresh: got error %v, want nil", err)
	}
	n, err := l.ForgetDeclarations(ctx, forgetAge)
	if err != nil || n != 1 {
		t.Fatalf("forget declarations: got %d, %v, want 1 (gone), nil", n, err)
	}
	wantLimits(t, "declared limits after forgetting", declared(t, l, time.Time{}), []store.Limit{drained, {Name: "fresh", Concurrency: 4}, old})
	// The hold taken under old is released, and the sweep deletes old's
	// counter but keeps drained's (its bucket is not full under the
	// declaration): then old's declaration goes, and drained's stays.
	if err := l.ReleaseHolds(ctx, []string{"h1", "d1"}); err != nil {
		t.Fatalf("release holds: got error %v, want nil", err)
	}
	sweepPass(t, l, 0, 100)
	if n, err := l.ForgetDeclarations(ctx, forgetAge); err != nil || n != 1 {
		t.Fatalf("forget declarations after the sweep: got %d, %v, want 1 (old), nil", n, err)
	}
	wantLimits(t, "declared limits after the sweep", declared(t, l, time.Time{}), []store.Limit{drained, {Name: "fresh", Concurrency: 4}})
	over, err := l.Limits(ctx)
	if err != nil || len(over) != 1 || over[0].Name != "old" || over[0].Concurrency != 2 {
		t.Fatalf("overrides after forgetting: got %+v, %v, want old's override kept", over, err)
	}
	adm, err = l.Admit(ctx, &store.AdmitParams{Limits: limits(drained), TTL: flowTTL, Requests: []store.AdmitRequest{{Holder: "d2", Keys: []store.LimitKey{lk("drained", "")}}}})
	if err != nil || len(adm) != 1 || adm[0].Admitted {
		t.Fatalf("admit under drained after forgetting and sweeping: got %+v, %v, want refused (its bucket kept, drained)", adm, err)
	}
	// A rollback declares old again: it comes back.
	if err := l.DeclareLimits(ctx, []store.Limit{old}); err != nil {
		t.Fatalf("declare old again: got error %v, want nil", err)
	}
	wantLimits(t, "declared limits after declaring old again", declared(t, l, time.Time{}), []store.Limit{drained, {Name: "fresh", Concurrency: 4}, old})
}

// waitAtLeast lets d pass: what the case waits for is the clock itself,
// not another goroutine.
func waitAtLeast(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(time.Until(end))
	}
}

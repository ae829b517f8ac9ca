package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// The FlowDeclaredForgotten case checks Limiter.ForgetDeclarations: a
// declaration no running engine refreshes goes, an override and the holds
// taken under it stay, and a later declaration brings it back.

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
	if err := l.DeclareLimits(ctx, []store.Limit{old, {Name: "gone", Rate: 2}}); err != nil {
		t.Fatalf("declare limits: got error %v, want nil", err)
	}
	if err := l.SetLimit(ctx, store.Limit{Name: "old", Concurrency: 2}); err != nil {
		t.Fatalf("set limit: got error %v, want nil", err)
	}
	adm, err := l.Admit(ctx, &store.AdmitParams{Limits: limits(old), Requests: []store.AdmitRequest{{Holder: "h1", Keys: []store.LimitKey{lk("old", "")}}}, TTL: flowTTL})
	if err != nil || len(adm) != 1 || !adm[0].Admitted {
		t.Fatalf("admit under old: got %+v, %v, want admitted", adm, err)
	}
	// Let the first declarations age past forgetAge (by every clock a
	// store may use), then declare "fresh": only the first two go.
	waitAtLeast(forgetAge + 300*time.Millisecond)
	if err := l.DeclareLimits(ctx, []store.Limit{{Name: "fresh", Concurrency: 4}}); err != nil {
		t.Fatalf("declare fresh: got error %v, want nil", err)
	}
	n, err := l.ForgetDeclarations(ctx, forgetAge)
	if err != nil || n != 2 {
		t.Fatalf("forget declarations: got %d, %v, want 2, nil", n, err)
	}
	wantLimits(t, "declared limits after forgetting", declared(t, l, time.Time{}), []store.Limit{{Name: "fresh", Concurrency: 4}})
	over, err := l.Limits(ctx)
	if err != nil || len(over) != 1 || over[0].Name != "old" || over[0].Concurrency != 2 {
		t.Fatalf("overrides after forgetting: got %+v, %v, want old's override kept", over, err)
	}
	if n, err := l.ForgetDeclarations(ctx, forgetAge); err != nil || n != 0 {
		t.Fatalf("forget declarations again: got %d, %v, want 0, nil", n, err)
	}
	// The hold taken under the forgotten limit is still released.
	if uses := limitUses(t, l); len(uses) != 1 || uses[0].InFlight != 1 {
		t.Fatalf("uses after forgetting: got %+v, want old's hold still in flight", uses)
	}
	if err := l.ReleaseHolds(ctx, []string{"h1"}); err != nil {
		t.Fatalf("release holds: got error %v, want nil", err)
	}
	for _, u := range limitUses(t, l) {
		if u.InFlight != 0 {
			t.Fatalf("uses after the release: got %+v, want nothing in flight", u)
		}
	}
	// A rollback declares old again: it comes back.
	if err := l.DeclareLimits(ctx, []store.Limit{old}); err != nil {
		t.Fatalf("declare old again: got error %v, want nil", err)
	}
	wantLimits(t, "declared limits after declaring old again", declared(t, l, time.Time{}), []store.Limit{{Name: "fresh", Concurrency: 4}, old})
}

// limitUses returns the store's counters in use.
func limitUses(t *testing.T, l store.Limiter) []store.LimitUse {
	t.Helper()
	uses, err := l.LimitUses(t.Context())
	if err != nil {
		t.Fatalf("limit uses: got error %v, want nil", err)
	}
	return uses
}

// waitAtLeast lets d pass: what the case waits for is the clock itself,
// not another goroutine.
func waitAtLeast(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		time.Sleep(time.Until(end))
	}
}

package storetest

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// The FlowDeclared cases check Limiter.DeclareLimits and DeclaredLimits:
// the code's declarations kept apart from the overrides, so that an
// operator's tool in another process can show them.

// declared returns the store's declarations without their UpdatedAt,
// failing the test unless each was set at or after since.
func declared(t *testing.T, l store.Limiter, since time.Time) []store.Limit {
	t.Helper()
	got, err := l.DeclaredLimits(t.Context())
	if err != nil {
		t.Fatalf("declared limits: got error %v, want nil", err)
	}
	for i := range got {
		if got[i].UpdatedAt.Before(since) {
			t.Errorf("declared limit %q: UpdatedAt %v, want at or after %v", got[i].Name, got[i].UpdatedAt, since)
		}
		got[i].UpdatedAt = time.Time{}
	}
	return got
}

// wantLimits fails the test unless got is want, in order.
func wantLimits(t *testing.T, what string, got, want []store.Limit) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %+v, want %+v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Errorf("%s [%d]: got %+v, want %+v", what, i, got[i], want[i])
		}
	}
}

func testFlowDeclaredKept(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	ctx := t.Context()
	before := now().Add(-time.Second)
	if got := declared(t, l, before); len(got) != 0 {
		t.Fatalf("declared limits of a new store: got %+v, want none", got)
	}
	// One replica declares b and a; another build declares b and c later:
	// the last writer wins for b, and a is kept.
	if err := l.DeclareLimits(ctx, []store.Limit{{Name: "b", Rate: 2.5, Burst: 5}, {Name: "a", Concurrency: 3}}); err != nil {
		t.Fatalf("declare limits: got error %v, want nil", err)
	}
	if err := l.DeclareLimits(ctx, []store.Limit{{Name: "c", Rate: 1}, {Name: "b", Concurrency: 7}}); err != nil {
		t.Fatalf("declare limits again: got error %v, want nil", err)
	}
	want := []store.Limit{{Name: "a", Concurrency: 3}, {Name: "b", Concurrency: 7}, {Name: "c", Rate: 1}}
	wantLimits(t, "declared limits", declared(t, l, before), want)
	// A name given twice in one call: the last one counts.
	if err := l.DeclareLimits(ctx, []store.Limit{{Name: "a", Concurrency: 1}, {Name: "a", Concurrency: 2}}); err != nil {
		t.Fatalf("declare a twice: got error %v, want nil", err)
	}
	want[0].Concurrency = 2
	wantLimits(t, "declared limits after declaring a twice", declared(t, l, before), want)
	if err := l.DeclareLimits(ctx, nil); err != nil {
		t.Fatalf("declare no limits: got error %v, want nil", err)
	}
	wantLimits(t, "declared limits after declaring none", declared(t, l, before), want)
}

func testFlowDeclaredApartFromOverrides(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	ctx := t.Context()
	if err := l.SetLimit(ctx, store.Limit{Name: "api", Concurrency: 9}); err != nil {
		t.Fatal(err)
	}
	if err := l.DeclareLimits(ctx, []store.Limit{{Name: "api", Concurrency: 2}, {Name: "db", Rate: 3}}); err != nil {
		t.Fatal(err)
	}
	ov, err := l.Limits(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range ov {
		ov[i].UpdatedAt = time.Time{}
	}
	wantLimits(t, "overrides after a declaration", ov, []store.Limit{{Name: "api", Concurrency: 9}})
	if err := l.ResetLimit(ctx, "api"); err != nil {
		t.Fatal(err)
	}
	wantLimits(t, "declared limits after resetting the override", declared(t, l, time.Time{}),
		[]store.Limit{{Name: "api", Concurrency: 2}, {Name: "db", Rate: 3}})
}

func testFlowDeclaredRefusedWhole(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	ctx := t.Context()
	for _, bad := range []store.Limit{
		{Name: "x", Concurrency: -1}, {Name: "x", Rate: -1}, {Name: "x", Rate: math.NaN()},
		{Name: "x", Rate: math.Inf(1)}, {Name: "x", Burst: -1}, {Name: ""},
	} {
		err := l.DeclareLimits(ctx, []store.Limit{{Name: "good", Concurrency: 1}, bad})
		if !errors.Is(err, store.ErrRejected) {
			t.Errorf("declare %+v: got error %v, want ErrRejected", bad, err)
		}
	}
	if got := declared(t, l, time.Time{}); len(got) != 0 {
		t.Errorf("declared limits after refused calls: got %+v, want none (all or nothing)", got)
	}
}

func testFlowDeclaredHostileNames(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	ctx := t.Context()
	for _, bad := range []string{"a\x00b", "a\xffb", strings.Repeat("n", store.MaxLimitName+1)} {
		err := l.DeclareLimits(ctx, []store.Limit{{Name: bad, Concurrency: 1}})
		var rej *store.RejectedError
		if !errors.Is(err, store.ErrRejected) || !errors.As(err, &rej) || rej.Field != "Name" {
			t.Errorf("declare limit named %q: got error %v, want ErrRejected naming Name", bad, err)
		}
	}
	script := `<script>alert("x")</script> é`
	long := strings.Repeat("é", store.MaxLimitName/2)
	if err := l.DeclareLimits(ctx, []store.Limit{{Name: script, Concurrency: 1}, {Name: long, Rate: 0.5}}); err != nil {
		t.Fatalf("declare hostile but valid names: got error %v, want nil", err)
	}
	want := []store.Limit{{Name: script, Concurrency: 1}, {Name: long, Rate: 0.5}}
	if long < script {
		want[0], want[1] = want[1], want[0]
	}
	wantLimits(t, "declared limits with hostile names", declared(t, l, time.Time{}), want)
}

// LimitUses refills a bucket by the declared rate when the limit has no
// override: what the operator sees is what the engines admit under.
func testFlowDeclaredRefillsUses(t *testing.T, s store.Store) {
	l := limiterOf(t, s)
	ctx := t.Context()
	lim := store.Limit{Name: "api", Rate: 1000, Burst: 3}
	if err := l.DeclareLimits(ctx, []store.Limit{lim}); err != nil {
		t.Fatal(err)
	}
	k := lk("api", "")
	wantAdmitted(t, "a burst of 3", admitAll(t, l, limits(lim), flowTTL, req("h1", k), req("h2", k), req("h3", k)), "111")
	deadline := time.Now().Add(10 * time.Second)
	for {
		uses, err := l.LimitUses(ctx)
		if err != nil {
			t.Fatalf("limit uses: got error %v, want nil", err)
		}
		if len(uses) == 1 && uses[0].LimitKey == k && uses[0].Tokens >= 1 && uses[0].Tokens <= 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("limit uses 10s after emptying a bucket refilled at 1000/s (declared): got %+v, want api's tokens refilled (1 to 3)", uses)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
}

package idem

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/countersaga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// declaredNow returns the store's declarations by name.
func declaredNow(t *testing.T, l store.Limiter) map[string]store.Limit {
	t.Helper()
	ls, err := l.DeclaredLimits(t.Context())
	if err != nil {
		t.Fatalf("declared limits: got error %v, want nil", err)
	}
	out := map[string]store.Limit{}
	for _, d := range ls {
		out[d.Name] = d
	}
	return out
}

// A running engine declares its limits again every HeartbeatInterval, so
// their UpdatedAt moves; its sweeper forgets a declaration nobody
// refreshes (a limit removed from the code), keeps the override of that
// limit, and keeps the engine's own.
func TestEngineRefreshesDeclarationsAndForgetsStaleOnes(t *testing.T) {
	ctx := context.Background()
	sq, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer sq.Close()
	// "removed" was declared by an older build, and overridden.
	if err := sq.DeclareLimits(ctx, []store.Limit{{Name: "removed", Concurrency: 3}}); err != nil {
		t.Fatal(err)
	}
	if err := sq.SetLimit(ctx, store.Limit{Name: "removed", Concurrency: 4}); err != nil {
		t.Fatal(err)
	}
	cfg := &Config{HeartbeatInterval: 20 * time.Millisecond, SweepInterval: time.Hour, Limits: []Limit{{Name: "parser-api", Concurrency: 5}}}
	e, err := NewEngine(sq, sq, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := e.sweeper.forgetAfter, time.Hour; got != want {
		t.Fatalf("forgetAfter with the default LimitCounterIdle: got %v, want %v", got, want)
	}
	// Forget after two seconds here: the bound in production is at least
	// 10 × store.DeclarationRefresh, far past the engine's refreshes.
	e.sweeper.forgetAfter = 2 * time.Second
	if err := e.Register(countersaga.Machine()); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Stop(ctx) }()
	first := declaredNow(t, sq)["parser-api"].UpdatedAt
	if first.IsZero() {
		t.Fatalf("declarations after Start: got %+v, want parser-api", declaredNow(t, sq))
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := e.Sweep(ctx); err != nil {
			t.Fatalf("sweep: got error %v, want nil", err)
		}
		d := declaredNow(t, sq)
		_, stale := d["removed"]
		live, ok := d["parser-api"]
		if !ok {
			t.Fatalf("declarations after a sweep: got %+v, want parser-api kept: its engine refreshes it", d)
		}
		if !stale && live.UpdatedAt.After(first) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("declarations after 20s: got %+v, want removed forgotten and parser-api refreshed after %v", d, first)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	over, err := sq.Limits(ctx)
	if err != nil || len(over) != 1 || over[0].Name != "removed" || over[0].Concurrency != 4 {
		t.Fatalf("overrides after forgetting: got %+v, %v, want removed's override kept", over, err)
	}
}

package enginetest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// CounterSweep runs a plain handler under a limit keyed by tenant (a cap
// of flowCap and a fast rate) on q, as store and transport, with
// Config.LimitCounterIdle of a nanosecond: once six tenants' calls are
// handled, their counters are in the store; the engine's sweep
// (Engine.Sweep, in batches of Config.SweepBatch 2) deletes them all, as
// their buckets are full again and no call holds a slot; a tenant's
// later calls are admitted and handled as before.
func CounterSweep(t *testing.T, q store.Queue) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	lim, ok := q.(store.Limiter)
	if !ok {
		t.Fatalf("%T is not a store.Limiter", q)
	}
	r := startParser(ctx, t, q, q, &idem.Config{BatchSize: 1, Lanes: 4, SweepBatch: 2, LimitCounterIdle: time.Nanosecond,
		Limits: []idem.Limit{{Name: "parser-api", MessageTypes: []string{parseType}, Concurrency: flowCap, Rate: 1000, Burst: 2,
			Key: func(env *idem.Envelope) string { return env.Headers["tenant"] }}}})
	r.open()
	publishTenants := func(prefix string, tenants ...string) {
		t.Helper()
		var envs []idem.Envelope
		for i, tenant := range tenants {
			envs = append(envs, idem.Envelope{ID: fmt.Sprintf("%s-%d", prefix, i), Type: parseType, CorrelationID: fmt.Sprintf("%s-file-%d", prefix, i),
				Headers: map[string]string{"tenant": tenant}})
		}
		if err := r.e.Publish(ctx, envs...); err != nil {
			t.Fatal(err)
		}
		WaitFor(t, time.Minute, prefix+": every call handled", func() (bool, error) {
			done := true
			r.f.read(func() {
				for _, env := range envs {
					done = done && r.f.handled[env.ID]
				}
			})
			return done, nil
		})
	}
	publishTenants("p", "t-1", "t-2", "t-3", "t-4", "t-5", "t-6")
	if uses, err := lim.LimitUses(ctx); err != nil || len(uses) != 6 {
		t.Fatalf("counters once six tenants' calls are handled: got %+v, %v, want 6", uses, err)
	}
	WaitFor(t, time.Minute, "every counter swept", func() (bool, error) {
		if _, err := r.e.Sweep(ctx); err != nil {
			return false, err
		}
		uses, err := lim.LimitUses(ctx)
		return len(uses) == 0, err
	})
	publishTenants("q", "t-1", "t-1", "t-7")
}

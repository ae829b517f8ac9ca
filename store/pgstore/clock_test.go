package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// An engine whose clock runs three minutes ahead (idem.Config.Clock) does
// not fire a timer that another replica has claimed and is still firing:
// the claim's one-minute lease runs on the database's clock. Once the
// other replica deleted it (fired), nothing is left to fire twice.
func TestEngineWithClockAheadLeavesHeldTimerClaims(t *testing.T) {
	url := testenv.PostgresURL(t)
	holder := openStore(t, pgstore.Config{})
	ahead, err := pgstore.Open(context.Background(), url, &pgstore.Config{Schema: holder.Schema()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ahead.Close() })
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	tm := store.Timer{SagaType: "counter", Key: "k-1", Name: "expire", DueAt: now.Add(-time.Second),
		Envelope: transport.Envelope{ID: "timer-1", Type: "test.Expire", CorrelationID: "k-1", SentAt: now, Body: []byte(`{}`)}}
	commitChanges(t, holder, &store.Changes{Timers: []store.Timer{tm}})

	// The holding replica claims the timer, as its timer poller does before
	// publishing it, for ClaimLease (1m).
	claimed, err := holder.ClaimTimers(ctx, &store.ClaimParams{Now: time.Now(), Limit: 10, Lease: time.Minute})
	if err != nil || len(claimed) != 1 {
		t.Fatalf("claim by the holding replica: got %d timers, %v; want 1, nil", len(claimed), err)
	}
	e := newEngine(t, ahead, &idem.Config{ClaimLease: time.Minute, Clock: func() time.Time { return time.Now().Add(3 * time.Minute) }})
	n, err := e.RunTimers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("RunTimers on a replica whose clock is 3m ahead fired %d timers held by another replica for 1m, want 0", n)
	}
	if err := holder.DeleteTimers(ctx, claimed); err != nil {
		t.Fatal(err)
	}
	if n, err := e.RunTimers(ctx); err != nil || n != 0 {
		t.Errorf("RunTimers after the holder fired the timer: got %d, %v; want 0, nil", n, err)
	}
}

package enginetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// The slow-batch scenario: one message of a batch takes three leases to
// apply, inside the saga's unit of work, while its batch mates on other
// keys are quick, and a second engine consumes the same queue. Without a
// lease kept alive, the lease runs out mid-batch, the second engine takes
// the whole batch, every commit is refused as "lease lost", and the batch
// never lands (a livelock).

// SlowType is the slow-batch scenario's saga type.
const SlowType = "slowbatch"

// Work starts a slow-batch saga; Slow makes its transition take long.
type Work struct {
	Key  string `json:"key"`
	Slow bool   `json:"slow,omitempty"`
}

// SlowCase is what SlowBatch runs on.
type SlowCase struct {
	// Stores are the two engines' stores, on one database, as two
	// processes would open it.
	Stores [2]store.Store
	// Transports are the two engines' transports: each store itself when
	// it is the queue, or two connections to one broker.
	Transports [2]transport.Transport
	// Lease is the transports' lease; the slow message takes three.
	Lease time.Duration
}

// slowMachine applies Work, sleeping for slow when it is the slow one and
// counting those runs.
func slowMachine(slow time.Duration, runs *atomic.Int64) *saga.Machine[struct{}] {
	m := saga.New[struct{}](SlowType)
	done := m.State("Done")
	work := saga.NewEvent[Work](m, func(w Work) string { return w.Key })
	m.Initially(saga.When(work).Then(func(_ *saga.Context[struct{}], w Work) error {
		if w.Slow {
			runs.Add(1)
			time.Sleep(slow) // the slow work the scenario is about
		}
		return nil
	}).TransitionTo(done))
	return m
}

// SlowBatch publishes a batch of 24 messages on 24 keys, the sixth of
// which takes three leases to apply, to two engines of one lane each, and
// checks that every message is applied within 20 leases, the slow one run
// at most twice, and nothing dead-lettered.
func SlowBatch(t *testing.T, c SlowCase) {
	t.Helper()
	var runs atomic.Int64
	var engines []*idem.Engine
	for i, tr := range c.Transports {
		e, err := idem.NewEngine(c.Stores[i], tr, &idem.Config{BatchSize: 32, Lanes: 1, Consumers: 1,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), StopTimeout: 5 * c.Lease})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(slowMachine(3*c.Lease, &runs)); err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	const n = 24
	envs := make([]idem.Envelope, n)
	for i := range envs {
		var err error
		if envs[i], err = engines[0].NewEnvelope(fmt.Sprintf("work-%02d", i), Work{Key: fmt.Sprintf("w-%02d", i), Slow: i == 5}); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	if err := engines[0].Publish(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	for _, e := range engines {
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Stop(context.Background()) })
	}
	applied := func() (int, error) {
		page, err := c.Stores[0].ListInstances(ctx, &store.ListParams{SagaType: SlowType, Limit: 100})
		return len(page), err
	}
	WaitFor(t, 20*c.Lease, "every message of the batch applied", func() (bool, error) {
		got, err := applied()
		if err == nil && got < n && runs.Load() > 3 {
			return false, fmt.Errorf("%d of %d messages applied, and the slow one ran %d times: its batch is handed out again and again", got, n, runs.Load())
		}
		return got == n, err
	})
	if r := runs.Load(); r > 2 {
		t.Errorf("the slow message ran %d times, want at most 2", r)
	}
	dead, err := c.Stores[0].ListDeadLetters(ctx, &store.ListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(dead) > 0 {
		t.Errorf("%d dead letters (first: %s, %s), want none", len(dead), dead[0].Reason, dead[0].Error)
	}
}

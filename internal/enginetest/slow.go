package enginetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
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
	s := startSlow(t, c, 0)
	WaitFor(t, 20*c.Lease, "every message of the batch applied", func() (bool, error) {
		got, err := s.applied()
		if err == nil && got < slowBatch && s.runs.Load() > 3 {
			return false, fmt.Errorf("%d of %d messages applied, and the slow one ran %d times: its batch is handed out again and again", got, slowBatch, s.runs.Load())
		}
		return got == slowBatch, err
	})
	if r := s.runs.Load(); r > 2 {
		t.Errorf("the slow message ran %d times, want at most 2", r)
	}
	if dead := s.dead(t); len(dead) > 0 {
		t.Errorf("%d dead letters (first: %s, %s), want none", len(dead), dead[0].Reason, dead[0].Error)
	}
}

// SlowBatchWithoutRenewal is SlowBatch on a queue whose leases cannot be
// kept alive (WithoutLeaseRenewal), with Config.MaxAttempts 3: the slow
// message's batch mates are applied, and the slow message is
// dead-lettered (retries_exhausted, naming the lease) after a bounded
// number of runs.
func SlowBatchWithoutRenewal(t *testing.T, c SlowCase) {
	t.Helper()
	const maxAttempts = 3
	s := startSlow(t, c, maxAttempts)
	WaitFor(t, 40*c.Lease, "the batch mates applied and the slow message dead-lettered", func() (bool, error) {
		got, err := s.applied()
		if err == nil && s.runs.Load() > 2*maxAttempts+2 {
			return false, fmt.Errorf("%d of %d messages applied, and the slow one ran %d times: its re-runs are not bounded", got, slowBatch-1, s.runs.Load())
		}
		return got == slowBatch-1 && len(s.dead(t)) == 1, err
	})
	dead := s.dead(t)
	if d := dead[0]; d.Reason != idem.ReasonRetriesExhausted || !strings.Contains(d.Error, "lease") || d.Envelope.ID != "work-05" {
		t.Errorf("dead letter %s: reason %q, error %q; want work-05, %q, an error naming the lease", d.Envelope.ID, d.Reason, d.Error, idem.ReasonRetriesExhausted)
	}
	if r := s.runs.Load(); r > 2*maxAttempts {
		t.Errorf("the slow message ran %d times, want at most %d (MaxAttempts, per engine)", r, 2*maxAttempts)
	}
}

// WithoutLeaseRenewal returns q without its lease extension
// (transport.LeaseExtender) and its other optional capabilities, as a
// queue that cannot extend leases.
func WithoutLeaseRenewal(q store.Queue) store.Queue { return &noRenewal{q} }

type noRenewal struct{ store.Queue }

const slowBatch = 24

// slowRun is a running slow-batch scenario.
type slowRun struct {
	c    SlowCase
	runs atomic.Int64
}

// startSlow publishes the batch and starts the two engines, with
// maxAttempts as their Config.MaxAttempts (0: the default).
func startSlow(t *testing.T, c SlowCase, maxAttempts int) *slowRun {
	t.Helper()
	s := &slowRun{c: c}
	var engines []*idem.Engine
	for i, tr := range c.Transports {
		e, err := idem.NewEngine(c.Stores[i], tr, &idem.Config{BatchSize: 32, Lanes: 1, Consumers: 1, MaxAttempts: maxAttempts,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), StopTimeout: 5 * c.Lease})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(slowMachine(3*c.Lease, &s.runs)); err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	envs := make([]idem.Envelope, slowBatch)
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
	return s
}

// applied counts the sagas the batch started.
func (s *slowRun) applied() (int, error) {
	page, err := s.c.Stores[0].ListInstances(context.Background(), &store.ListParams{SagaType: SlowType, Limit: 100})
	return len(page), err
}

// dead lists the dead letters.
func (s *slowRun) dead(t testing.TB) []store.DeadLetter {
	t.Helper()
	dead, err := s.c.Stores[0].ListDeadLetters(context.Background(), &store.ListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	return dead
}

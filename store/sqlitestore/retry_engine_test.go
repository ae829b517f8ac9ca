package sqlitestore_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

type (
	flaky      struct{ Done bool }
	flakyStart struct{ ID string }
)

// On SQLite as its own queue (the engine claims the message inside the
// unit of work, and returns it there), a message that fails once shows
// its retry state before its second delivery, and none after it succeeds.
func TestEngineRecordsRetryStateOnOwnQueue(t *testing.T) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: quiet, PollInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	k := store.Key{SagaType: "flaky", Key: "f-1"}
	var mu sync.Mutex
	var calls int
	var before []store.Retry
	m := saga.New[flaky]("flaky")
	done := m.Final("Done")
	start := saga.NewEvent[flakyStart](m, func(e flakyStart) string { return e.ID })
	m.Initially(saga.When(start).Then(func(c *saga.Context[flaky], _ flakyStart) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		if calls == 1 {
			return idem.RetryAfter(20*time.Millisecond, errors.New("upstream: 503"))
		}
		rs, rerr := st.Retries(ctx, k)
		before, c.Data.Done = rs, true
		return rerr
	}).TransitionTo(done))
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(m); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	env, err := e.NewEnvelope("start-f-1", flakyStart{ID: "f-1"})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := e.PublishAndWait(wctx, env); err != nil {
		t.Fatalf("apply start-f-1: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if calls != 2 || len(before) != 1 {
		t.Fatalf("handler ran %d times and saw retries %+v before the second; want 2 runs and one retry", calls, before)
	}
	if r := before[0]; r.ID != "start-f-1" || r.Attempts != 1 || r.Error == "" || !r.NextAttemptAt.After(r.LastFailedAt) {
		t.Errorf("retry before the second delivery: %+v; want start-f-1, attempt 1, its error, a next attempt after the failure", r)
	}
	rs, err := st.QueryRetries(ctx, &store.RetryQuery{})
	if err != nil || len(rs) != 0 {
		t.Errorf("after success: retries %+v, error %v; want none", rs, err)
	}
}

// raceTracer holds the unit of work that gave a message back between its
// commit and its settling until another engine has applied the message,
// which is the window in which a retry written after the commit raced the
// redelivery; failedDone closes once that unit of work has settled.
type raceTracer struct {
	applied    chan struct{} // closed when a unit of work applied the message
	failedDone chan struct{} // closed when the failed unit of work ended
	held       atomic.Bool
	once       sync.Once
}

type unitKey struct{}

type raceUnit struct {
	t      *raceTracer
	failed atomic.Bool
}

func (u *raceUnit) End(idem.UnitOfWorkEnd) {
	if u.failed.Load() {
		close(u.t.failedDone)
	}
}

type raceMessage struct{ u *raceUnit }

func (m raceMessage) TraceParent() string { return "" }

// End runs after the message's commit, before its unit of work settles.
func (m raceMessage) End(e idem.MessageEnd) {
	switch {
	case e.Outcome == idem.OutcomeApplied:
		m.u.t.once.Do(func() { close(m.u.t.applied) })
	case e.Outcome == idem.OutcomeRetried && m.u.t.held.CompareAndSwap(false, true):
		m.u.failed.Store(true)
		<-m.u.t.applied
	}
}

type noBackground struct{}

func (noBackground) End(idem.BackgroundEnd) {}

func (r *raceTracer) StartUnitOfWork(ctx context.Context, _ idem.UnitOfWorkStart) (context.Context, idem.UnitOfWorkSpan) {
	u := &raceUnit{t: r}
	return context.WithValue(ctx, unitKey{}, u), u
}

func (r *raceTracer) StartMessage(ctx context.Context, _ idem.MessageStart) (context.Context, idem.MessageSpan) {
	u, _ := ctx.Value(unitKey{}).(*raceUnit)
	if u == nil {
		u = &raceUnit{t: r}
	}
	return ctx, raceMessage{u: u}
}

func (r *raceTracer) StartBackground(ctx context.Context, _ idem.BackgroundTask) (context.Context, idem.BackgroundSpan) {
	return ctx, noBackground{}
}

// Two engines on one SQLite file, the store as their queue. The first
// delivery fails; its unit of work is held after its commit, before it
// settles (a tracer), until the other engine has the message again (its
// lease ran out) and applies it. Once both have settled, the message
// leaves no retry row: the retry was recorded in the failed commit and
// cleared by the applying one. (Written by the settler after the commit,
// as before, it outlived the clear: a row nothing would ever delete.)
func TestEngineRedeliveryBeforeSettleLeavesNoRetry(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "idem.db")
	tr := &raceTracer{applied: make(chan struct{}), failedDone: make(chan struct{})}
	var calls atomic.Int64
	m := saga.New[flaky]("flaky")
	done := m.Final("Done")
	start := saga.NewEvent[flakyStart](m, func(e flakyStart) string { return e.ID })
	m.Initially(saga.When(start).Then(func(c *saga.Context[flaky], _ flakyStart) error {
		if calls.Add(1) == 1 {
			return idem.RetryAfter(time.Millisecond, errors.New("upstream: 503"))
		}
		c.Data.Done = true
		return nil
	}).TransitionTo(done))
	var first *sqlitestore.Store
	var engines []*idem.Engine
	for range 2 {
		st, err := sqlitestore.Open(ctx, path, &sqlitestore.Config{Logger: quiet, PollInterval: 5 * time.Millisecond, Lease: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		if first == nil {
			first = st
		}
		e, err := idem.NewEngine(st, st, &idem.Config{Logger: quiet, Tracer: tr})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(m); err != nil {
			t.Fatal(err)
		}
		engines = append(engines, e)
	}
	env, err := engines[0].NewEnvelope("start-race", flakyStart{ID: "race"})
	if err != nil {
		t.Fatal(err)
	}
	if err := engines[0].Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	for _, e := range engines {
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Stop(context.Background()) })
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for _, ch := range []chan struct{}{tr.applied, tr.failedDone} {
		select {
		case <-ch:
		case <-wctx.Done():
			t.Fatalf("the message was not failed, applied elsewhere and settled (handler ran %d times)", calls.Load())
		}
	}
	if n := calls.Load(); n < 2 {
		t.Fatalf("handler ran %d times, want a failure, then the redelivery applied", n)
	}
	rs, err := first.QueryRetries(ctx, &store.RetryQuery{})
	if err != nil || len(rs) != 0 {
		t.Errorf("after the redelivery applied and the failure settled: retries %+v, error %v; want none", rs, err)
	}
}

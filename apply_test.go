package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// Apply returns once the message is committed, with the saga as stored,
// and reports a repeat as a duplicate. The engine that waits is not the
// one that applies: only the second replica consumes.
func TestApplyWaitsForAnotherReplica(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{replicas: 2, noStart: true})
	if err := b.engines[1].Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.engines[1].Stop(context.Background()) })
	b.stopOnce.Do(func() {}) // engine 0 never starts
	waiter := b.engines[0]
	r, err := waiter.PublishAndWait(b.ctx, b.env("inc-1", Inc{Key: "Cafe\u0301", N: 3}))
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if r.Duplicate || r.SagaType != counterType || r.Key != "Caf\u00e9" || r.State != "Open" || r.Version != 1 {
		t.Fatalf("Apply result %+v: want a new message, saga counter/Café in Open at version 1", r)
	}
	r, err = waiter.PublishAndWait(b.ctx, b.env("inc-1", Inc{Key: "Cafe\u0301", N: 3}))
	if err != nil || !r.Duplicate || r.Version != 1 {
		t.Fatalf("second Apply: %+v, %v; want a duplicate at version 1", r, err)
	}
	r, err = waiter.PublishAndWait(b.ctx, b.env("inc-2", Inc{Key: "Café", N: 4}))
	if err != nil || r.Duplicate || r.Version != 2 || string(r.Data) == "" {
		t.Fatalf("third Apply: %+v, %v; want a new message at version 2", r, err)
	}
	if c, _ := b.counter("Café"); c.Total != 7 {
		t.Errorf("total %d, want 7", c.Total)
	}
}

// A message the consumer dead-letters ends Apply with ErrDeadLettered.
func TestApplyReportsDeadLetter(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	if _, err := b.engine().PublishAndWait(b.ctx, b.env("inc-1", Inc{Key: "k", N: 1})); err != nil {
		t.Fatal(err)
	}
	_, err := b.engine().PublishAndWait(b.ctx, b.env("poke-1", Poke{Key: "k"}))
	if !errors.Is(err, idem.ErrDeadLettered) {
		t.Fatalf("Apply of an unhandled event: %v, want ErrDeadLettered", err)
	}
}

// A deadline ends the wait, not the message: it is applied when a
// consumer runs, and a later Apply reports it as a duplicate.
func TestApplyDeadlineKeepsTheMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{noStart: true})
	ctx, cancel := context.WithTimeout(b.ctx, 50*time.Millisecond)
	defer cancel()
	env := b.env("inc-1", Inc{Key: "k", N: 2})
	if _, err := b.engine().PublishAndWait(ctx, env); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Apply with no consumer: %v, want DeadlineExceeded", err)
	}
	b.start()
	b.settle()
	r, err := b.engine().PublishAndWait(b.ctx, env)
	if err != nil || !r.Duplicate || r.Version != 1 {
		t.Fatalf("Apply after the consumer ran: %+v, %v; want a duplicate at version 1", r, err)
	}
}

// Apply refuses at once what it cannot wait for.
func TestApplyRefusesWhatItCannotWaitFor(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	for name, env := range map[string]idem.Envelope{
		"no saga consumes it": {ID: "x", Type: "nobody.Consumes", Body: []byte(`{}`)},
		"invalid key":         b.env("y", Inc{Key: "a\x00b", N: 1}),
		"NUL in ID":           {ID: "a\x00", Type: incType, Body: []byte(`{"key":"k","n":1}`)},
	} {
		if _, err := b.engine().PublishAndWait(b.ctx, env); err == nil {
			t.Errorf("%s: Apply returned no error", name)
		}
	}
	if n := b.mem.Stats(); n.Published != 0 {
		t.Errorf("%d messages published, want none", n.Published)
	}
}

// deadLetterSpy records how many units of work were open whenever the
// engine read a dead letter.
type deadLetterSpy struct {
	*hookStore
	mu   sync.Mutex
	open []int32
}

func (s *deadLetterSpy) GetDeadLetter(ctx context.Context, id string) (*store.DeadLetter, error) {
	s.mu.Lock()
	s.open = append(s.open, s.hookStore.open.Load())
	s.mu.Unlock()
	return s.hookStore.GetDeadLetter(ctx, id)
}

// Apply's wait holds no unit of work while it reads the dead letters: on
// PostgreSQL each waiter would otherwise hold one pooled connection and
// wait for a second, and as many waiters as connections hang the pool.
// The spy counts the waiter's units of work only: the consumer's, on the
// same memstore, may be open at any time.
func TestApplyHoldsNoUnitOfWorkWhileReadingDeadLetters(t *testing.T) {
	t.Parallel()
	b := setup(t, &options{replicas: 2, noStart: true})
	spy := &deadLetterSpy{hookStore: &hookStore{Store: b.mstore}}
	waiter, err := idem.NewEngine(spy, b.mem, &idem.Config{Logger: discard, Clock: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := waiter.Register(b.machine); err != nil {
		t.Fatal(err)
	}
	if err := b.engines[1].Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.engines[1].Stop(context.Background()) })
	b.stopOnce.Do(func() {})
	if _, err := waiter.PublishAndWait(b.ctx, b.env("inc-1", Inc{Key: "k", N: 1})); err != nil {
		t.Fatal(err)
	}
	if _, err := waiter.PublishAndWait(b.ctx, b.env("poke-1", Poke{Key: "k"})); !errors.Is(err, idem.ErrDeadLettered) {
		t.Fatalf("Apply of an unhandled event: %v, want ErrDeadLettered", err)
	}
	spy.mu.Lock()
	defer spy.mu.Unlock()
	if len(spy.open) == 0 {
		t.Fatal("Apply never read the dead letters")
	}
	for i, n := range spy.open {
		if n != 0 {
			t.Errorf("dead-letter read %d: %d units of work open, want 0", i, n)
		}
	}
}

// splitLoadStore reads a Load's instances and its inbox records at two
// moments, as pgstore does (two statements at READ COMMITTED): gap runs
// between the two reads, where another unit of work may commit.
type splitLoadStore struct {
	store.Store
	gap func()
}

func (s *splitLoadStore) Begin(ctx context.Context) (store.UnitOfWork, error) {
	u, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &splitLoadUOW{UnitOfWork: u, gap: s.gap}, nil
}

type splitLoadUOW struct {
	store.UnitOfWork
	gap func()
}

func (u *splitLoadUOW) Load(ctx context.Context, p *store.LoadParams) (*store.LoadResult, error) {
	r, err := u.UnitOfWork.Load(ctx, &store.LoadParams{Keys: p.Keys, Tokens: p.Tokens})
	if err != nil {
		return nil, err
	}
	u.gap()
	inbox, err := u.UnitOfWork.Load(ctx, &store.LoadParams{Inbox: p.Inbox})
	if err != nil {
		return nil, err
	}
	r.Seen = inbox.Seen
	return r, nil
}

// Apply's result is the saga as committed with the message, even on a
// store whose Load reads the inbox after the instances (which the store
// contract allows): a commit that lands between the two reads shows the
// message as seen, and the saga read before it is from before the message.
// Apply must not report that older saga (HelixQueue's assigner that won
// read the batch still PENDING, without its own request, and reported a
// loss: no winner among 50).
func TestApplyResultIsTheSagaAfterItsCommit(t *testing.T) {
	t.Parallel()
	hooks := &hookStore{}
	b := setup(t, &options{hooks: hooks, replicas: 2, noStart: true})
	// The consumer's commit of the update waits for a waiter's read to be
	// between its two halves, and the read goes on once the commit landed.
	ready, proceed, landed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var gated, reported atomic.Bool
	hooks.beforeCommit = func(c *store.Changes) error {
		if len(c.Updates) > 0 && gated.CompareAndSwap(false, true) {
			close(ready)
			<-proceed
		}
		return nil
	}
	hooks.afterCommit = func(c *store.Changes, err error) error {
		if len(c.Updates) > 0 && reported.CompareAndSwap(false, true) {
			close(landed)
		}
		return err
	}
	var interleaved sync.Once
	split := &splitLoadStore{Store: b.mstore, gap: func() {
		select {
		case <-ready:
			interleaved.Do(func() { close(proceed); <-landed })
		default:
		}
	}}
	waiter, err := idem.NewEngine(split, b.mem, &idem.Config{Logger: discard, Clock: b.clock.Now})
	if err != nil {
		t.Fatal(err)
	}
	if err := waiter.Register(b.machine); err != nil {
		t.Fatal(err)
	}
	if err := b.engines[1].Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.engines[1].Stop(context.Background()) })
	b.stopOnce.Do(func() {})
	if r, err := waiter.PublishAndWait(b.ctx, b.env("inc-1", Inc{Key: "k", N: 1})); err != nil || r.Version != 1 {
		t.Fatalf("first Apply: %+v, %v; want version 1", r, err)
	}
	r, err := waiter.PublishAndWait(b.ctx, b.env("inc-2", Inc{Key: "k", N: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if !reported.Load() {
		t.Fatal("the update's commit never ran between the two halves of a read")
	}
	var c Counter
	if err := json.Unmarshal(r.Data, &c); err != nil {
		t.Fatal(err)
	}
	if r.Duplicate || r.Version != 2 || c.Total != 3 || c.Incs != 2 {
		t.Fatalf("second Apply: %+v (data %+v); want the saga with the message: version 2, total 3, 2 increments", r, c)
	}
}

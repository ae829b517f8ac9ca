package idem_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// A store that refuses writes (store.ErrReadOnly: after a failover its
// database server is no longer the primary) makes Ready fail, naming it,
// until a unit of work commits again; an ordinary store error does not.
func TestReadyReportsAStoreThatRefusesWrites(t *testing.T) {
	t.Parallel()
	var fail atomic.Pointer[error] // the error commits fail with; nil: none
	hooks := &hookStore{beforeCommit: func(c *store.Changes) error {
		if err := fail.Load(); err != nil && writesState(c) {
			return *err
		}
		return nil
	}}
	failWith := func(err error) { fail.Store(&err) }
	b := setup(t, &options{machine: newCounter(nil), hooks: hooks})
	e := b.engines[0]
	if err := e.Ready(); err != nil {
		t.Fatalf("Ready before any failure: %v", err)
	}
	failWith(errors.New("injected: connection reset"))
	b.publish(b.env("inc-1", Inc{Key: "k", N: 1}))
	eventually(t, func() bool { return b.mem.Stats().Nacked > 0 })
	if err := e.Ready(); err != nil {
		t.Errorf("Ready after an ordinary store error: %v, want nil", err)
	}
	failWith(fmt.Errorf("commit: %w: cannot execute INSERT in a read-only transaction", store.ErrReadOnly))
	eventually(t, func() bool { return errors.Is(e.Ready(), store.ErrReadOnly) })
	if err := e.Ready(); !strings.Contains(err.Error(), "refuses writes") {
		t.Errorf("Ready = %v, want it to say the store refuses writes", err)
	}
	fail.Store(nil)
	b.settle()
	eventually(t, func() bool { return e.Ready() == nil })
	if c, _ := b.counter("k"); c.Total != 1 {
		t.Errorf("total %d, want 1", c.Total)
	}
}

// Units of work refused with store.ErrReadOnly (a failover in progress)
// say nothing about their messages: however many attempts they take, the
// messages are not dead-lettered, and apply once the store takes writes.
func TestReadOnlyStoreDeadLettersNothing(t *testing.T) {
	t.Parallel()
	var refuse atomic.Bool
	refuse.Store(true)
	var refused atomic.Int32
	hooks := &hookStore{beforeCommit: func(c *store.Changes) error {
		// Only the message's commit is refused: a dead letter's commit
		// would land, as it would if the failover ended in between.
		if refuse.Load() && writesState(c) {
			refused.Add(1)
			return fmt.Errorf("commit: %w: cannot execute INSERT in a read-only transaction", store.ErrReadOnly)
		}
		return nil
	}}
	b := setup(t, &options{machine: newCounter(nil), hooks: hooks, cfg: idem.Config{MaxAttempts: 2}})
	b.publish(b.env("inc-1", Inc{Key: "k", N: 1}))
	eventually(t, func() bool { return refused.Load() >= 6 || len(b.deadLetters()) > 0 })
	refuse.Store(false)
	b.settle()
	if dl := b.deadLetters(); len(dl) != 0 {
		t.Errorf("dead letters %+v, want none: the store refused writes, nothing was wrong with the message", dl)
	}
	if c, _ := b.counter("k"); c.Total != 1 {
		t.Errorf("total %d, want 1", c.Total)
	}
}

// A commit refused with store.ErrReadOnly committed nothing: the engine
// does not read it back (during a failover the read-back would only wait
// for a store that takes no writes), it returns the messages at once.
func TestReadOnlyCommitIsNotReadBack(t *testing.T) {
	t.Parallel()
	var refused, readBacks atomic.Int32
	hooks := &hookStore{
		beforeCommit: func(c *store.Changes) error {
			if writesState(c) && refused.CompareAndSwap(0, 1) {
				return fmt.Errorf("commit: %w: cannot execute INSERT in a read-only transaction", store.ErrReadOnly)
			}
			return nil
		},
		afterLoad: func(p *store.LoadParams) {
			if len(p.Keys) == 0 && len(p.Inbox) > 0 {
				readBacks.Add(1)
			}
		},
	}
	b := setup(t, &options{machine: newCounter(nil), hooks: hooks})
	b.publish(b.env("inc-1", Inc{Key: "k", N: 1}))
	b.settle()
	if refused.Load() != 1 {
		t.Fatal("the refusal was not injected")
	}
	if n := readBacks.Load(); n != 0 {
		t.Errorf("%d read-backs of a commit refused with store.ErrReadOnly, want 0: nothing was committed", n)
	}
	if c, _ := b.counter("k"); c.Total != 1 {
		t.Errorf("total %d, want 1", c.Total)
	}
}

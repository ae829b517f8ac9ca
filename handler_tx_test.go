package idem_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// TestHandlerRunsOutsideUnitOfWork: a plain handler runs while no unit of
// work is open, so a handler that calls another service holds no pooled
// connection idle in a transaction; its inbox record still commits, and
// a duplicate does not run it again.
func TestHandlerRunsOutsideUnitOfWork(t *testing.T) {
	t.Parallel()
	hooks := &hookStore{}
	var calls callCounter
	var mu sync.Mutex
	var openDuring []int32
	b := setup(t, &options{
		hooks: hooks,
		cfg:   idem.Config{Lanes: 1, Consumers: 1},
		handlers: map[string]idem.HandlerFunc{auditType: func(_ context.Context, env idem.Envelope) error {
			calls.inc(env.ID)
			mu.Lock()
			openDuring = append(openDuring, hooks.open.Load())
			mu.Unlock()
			return nil
		}},
	})
	const n = 20
	for i := range n {
		env := auditEnv(fmt.Sprintf("audit-%d", i))
		b.publish(env, env)
	}
	b.settle()
	b.stop()
	for i, open := range openDuring {
		if open != 0 {
			t.Errorf("call %d: %d units of work open while the handler ran, want 0", i, open)
		}
	}
	for i := range n {
		if got := calls.get(fmt.Sprintf("audit-%d", i)); got != 1 {
			t.Errorf("handler ran %d times for audit-%d, want 1", got, i)
		}
	}
	if s := b.stats(); s.Applied != n {
		t.Errorf("stats %+v: want Applied %d", s, n)
	}
	if open := hooks.open.Load(); open != 0 {
		t.Errorf("%d units of work left open after stop", open)
	}
}

// TestHandlerNotRerunAfterConflict: when the commit of a handler lane's
// inbox records loses a race (a token claimed elsewhere, say), the lane is
// re-applied; the handlers that already ran must not run again, since
// their side effects happened outside the unit of work.
func TestHandlerNotRerunAfterConflict(t *testing.T) {
	t.Parallel()
	var conflicted atomic.Bool
	hooks := &hookStore{beforeCommit: func(c *store.Changes) error {
		if len(c.Inbox) > 0 && conflicted.CompareAndSwap(false, true) {
			return store.ErrConflict
		}
		return nil
	}}
	var calls callCounter
	b := setup(t, &options{
		hooks:   hooks,
		cfg:     idem.Config{Lanes: 1, Consumers: 1},
		noStart: true,
		handlers: map[string]idem.HandlerFunc{auditType: func(_ context.Context, env idem.Envelope) error {
			calls.inc(env.ID)
			return nil
		}},
	})
	const n = 5
	for i := range n {
		b.publish(auditEnv(fmt.Sprintf("audit-%d", i)))
	}
	b.start()
	b.settle()
	b.stop()
	if !conflicted.Load() {
		t.Fatal("no commit conflicted: the test proves nothing")
	}
	for i := range n {
		if got := calls.get(fmt.Sprintf("audit-%d", i)); got != 1 {
			t.Errorf("handler ran %d times for audit-%d, want 1", got, i)
		}
	}
}

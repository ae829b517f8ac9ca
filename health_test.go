package idem_test

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

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

package idem_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// A unit of work that lost an optimistic-concurrency race is re-applied
// as two units of work, each with half of its keys, not as one unit per
// key: with replicas sharing a queue, every unit of work that meets
// another replica's on one key became as many commits as it had keys,
// and the extra commits queued the replicas behind one another (idem
// bench --replicas, docs/scaling.md). A contended key is still isolated,
// by halving again at each conflict.
func TestConflictHalvesTheUnitOfWork(t *testing.T) {
	t.Parallel()
	const keys = 32
	var commits, conflicted atomic.Int32
	hooks := &hookStore{beforeCommit: func(c *store.Changes) error {
		if !writesState(c) {
			return nil
		}
		commits.Add(1)
		if conflicted.CompareAndSwap(0, 1) {
			return fmt.Errorf("commit saga counter/k-0: %w", store.ErrConflict)
		}
		return nil
	}}
	b := setup(t, &options{machine: newCounter(nil), hooks: hooks, cfg: idem.Config{Lanes: 1, Consumers: 1, BatchSize: 64}, noStart: true})
	var envs []idem.Envelope
	for i := range keys {
		envs = append(envs, b.env(fmt.Sprintf("inc-%d", i), Inc{Key: fmt.Sprintf("k-%d", i), N: 1}))
	}
	b.publish(envs...) // one batch, one lane: one unit of work
	b.start()
	b.settle()
	for i := range keys {
		if c, _ := b.counter(fmt.Sprintf("k-%d", i)); c.Total != 1 {
			t.Errorf("counter k-%d: total %d, want 1", i, c.Total)
		}
	}
	if got := commits.Load(); got != 3 {
		t.Errorf("%d commits for %d keys in one unit of work and one conflict; want 3 (the conflicted one, then its two halves)", got, keys)
	}
}

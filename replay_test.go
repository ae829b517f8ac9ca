package idem_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// A replayed message that fails again leaves the dead letter with its
// first failure and a replay settled as failed, replay after replay.
func TestReplayThatFailsAgainKeepsHistory(t *testing.T) {
	t.Parallel()
	m, _ := failingCounter("broken", func(int64) error { return idem.Permanent(errors.New("bad config")) })
	b := setup(t, &options{machine: m})
	b.send("inc-broken", Inc{Key: "broken", N: 1})
	b.settle()
	dls := b.deadLetters()
	if len(dls) != 1 {
		t.Fatalf("got %d dead letters, want 1", len(dls))
	}
	first := dls[0]
	for n := 1; n <= 2; n++ {
		if err := b.engine().ReplayDeadLetter(b.ctx, first.ID); err != nil {
			t.Fatalf("replay %d: %v", n, err)
		}
		b.settle()
		dls = b.deadLetters()
		if len(dls) != 1 || len(dls[0].Replays) != n {
			t.Fatalf("after replay %d: dead letters %+v, want the one with %d replays", n, dls, n)
		}
		d := dls[0]
		if !d.FirstFailedAt.Equal(first.FirstFailedAt) || d.FirstReason != first.Reason || d.FirstError != first.Error {
			t.Errorf("after replay %d: first failure %v %q %q, want the first one kept: %v %q %q", n,
				d.FirstFailedAt, d.FirstReason, d.FirstError, first.FirstFailedAt, first.Reason, first.Error)
		}
		for i, r := range d.Replays {
			if r.Outcome != store.ReplayFailed || r.Reason != idem.ReasonPermanent || r.SettledAt.Before(r.At) {
				t.Errorf("after replay %d: replay %d is %+v, want failed again with %s", n, i, r, idem.ReasonPermanent)
			}
		}
	}
}

// A replayed message that fails again, whose commit reports an error
// without landing, is not taken for recorded because its earlier dead
// letter exists: it is retried, and the replay is settled as failed.
func TestReplayFailingAgainWithALostCommitIsRetried(t *testing.T) {
	t.Parallel()
	var lie atomic.Bool
	hooks := &hookStore{beforeCommit: func(c *store.Changes) error {
		if len(c.DeadLetters) > 0 && lie.CompareAndSwap(true, false) {
			return errors.New("injected: connection reset before COMMIT")
		}
		return nil
	}}
	m, _ := failingCounter("broken", func(int64) error { return idem.Permanent(errors.New("bad config")) })
	b := setup(t, &options{machine: m, hooks: hooks})
	b.send("inc-broken", Inc{Key: "broken", N: 1})
	b.settle()
	lie.Store(true)
	if err := b.engine().ReplayDeadLetter(b.ctx, "inc-broken"); err != nil {
		t.Fatal(err)
	}
	b.settle()
	if lie.Load() {
		t.Fatal("no commit was failed: the test did not test")
	}
	dls := b.deadLetters()
	if len(dls) != 1 || len(dls[0].Replays) != 1 || dls[0].Replays[0].Outcome != store.ReplayFailed {
		t.Fatalf("after a replay failing again through a lost commit: %+v, want the replay failed", dls)
	}
}

// Apply of a message whose dead letter was re-queued waits for the
// replay's outcome instead of reporting it dead-lettered.
func TestApplyWaitsOnAReplay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	env := b.env("inc-1", Inc{Key: "k", N: 1})
	uow, err := b.mstore.Begin(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	dl := store.DeadLetter{ID: "inc-1", Envelope: env, Reason: idem.ReasonPermanent, Error: "bad config", SagaType: counterType, Key: "k",
		Attempts: 1, FirstFailedAt: now, LastFailedAt: now}
	if err := uow.Commit(b.ctx, &store.Changes{DeadLetters: []store.DeadLetter{dl}}); err != nil {
		t.Fatal(err)
	}
	if err := b.mstore.BeginReplay(b.ctx, "inc-1", now); err != nil {
		t.Fatal(err)
	}
	r, err := b.engine().PublishAndWait(b.ctx, env)
	if err != nil || r.Version != 1 {
		t.Fatalf("Apply of a message whose dead letter is re-queued: %+v, %v; want it applied at version 1", r, err)
	}
}

package idem_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

// A dead letter whose replay succeeded stays listed with its
// reason, so a later bulk replay by reason selects it again; once the
// handler's inbox record is swept (Retention), the message runs again.
func TestBulkReplaySkipsSucceededLetter(t *testing.T) {
	t.Parallel()
	b, runs, _ := chargeDeadLettered(t, idem.Config{}, false)
	if err := b.engine().ReplayDeadLetter(b.ctx, "charge-1"); err != nil {
		t.Fatal(err)
	}
	b.settle()
	if runs.Load() != 1 {
		t.Fatalf("runs %d after the replay, want 1", runs.Load())
	}
	if dls := b.deadLetters(); len(dls) != 1 || dls[0].LastReplay().Outcome != store.ReplaySucceeded {
		t.Fatalf("dead letters %+v", dls)
	}
	// Retention passes: the handler's inbox record is swept.
	if _, err := b.mstore.Sweep(b.ctx, &store.SweepParams{InboxBefore: time.Now().Add(30 * 24 * time.Hour), Limit: 1000}); err != nil {
		t.Fatal(err)
	}
	// The operator replays "all permanent_error" as the console offers.
	f := &inspect.DeadLetterFilter{Reason: idem.ReasonPermanent}
	c, err := inspect.CountByReason(b.ctx, b.st, f)
	if err != nil {
		t.Fatal(err)
	}
	f.AsOf = c.AsOf
	var matched int
	_ = inspect.EachDeadLetter(b.ctx, b.st, f, func(ds []store.DeadLetter) error {
		for _, d := range ds {
			matched++
			if err := b.engine().ReplayDeadLetter(b.ctx, d.ID); err != nil {
				return err
			}
		}
		return nil
	})
	b.settle()
	if matched != 0 || c.Total != 0 {
		t.Errorf("bulk replay by reason matched %d (count said %d), want 0: the replay succeeded", matched, c.Total)
	}
	if err := b.engine().ReplayDeadLetter(b.ctx, "charge-1"); !errors.Is(err, idem.ErrReplaySucceeded) {
		t.Errorf("replay of the succeeded dead letter: got error %v, want one wrapping idem.ErrReplaySucceeded", err)
	}
	if runs.Load() != 1 {
		t.Errorf("the handler ran %d times: a dead letter already replayed successfully was selected by a bulk replay and ran again", runs.Load())
	}
}

// Two replays of one dead letter before the first is consumed: the
// first stays pending forever.
func TestReplayWhilePendingIsRefused(t *testing.T) {
	t.Parallel()
	m, _ := failingCounter("broken", func(int64) error { return idem.Permanent(errors.New("bad config")) })
	b := setup(t, &options{machine: m, noStart: true})
	b.send("inc-broken", Inc{Key: "broken", N: 1})
	b.start()
	b.settle()
	b.stop()
	// engines stopped: both replays are queued before either is consumed
	b2 := setup(t, &options{machine: m, shareStore: b.mstore, shareMem: b.mem, noStart: true})
	if err := b2.engine().ReplayDeadLetter(b.ctx, "inc-broken"); err != nil {
		t.Fatal(err)
	}
	if err := b2.engine().ReplayDeadLetter(b.ctx, "inc-broken"); !errors.Is(err, store.ErrReplayPending) {
		t.Fatalf("second replay while the first is pending: got error %v, want one wrapping store.ErrReplayPending", err)
	}
	b2.start()
	b2.settle()
	dls := b2.deadLetters()
	if len(dls) != 1 {
		t.Fatalf("dead letters %+v", dls)
	}
	for i, r := range dls[0].Replays {
		t.Logf("replay %d: %s", i, r.Outcome)
		if r.Outcome == store.ReplayPending {
			t.Errorf("replay %d is still pending although both copies were consumed and dead-lettered again", i)
		}
	}
}

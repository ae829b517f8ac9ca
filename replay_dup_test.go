package idem_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// A replayed copy found already applied (a later copy of the dead-lettered
// message was applied meanwhile) is settled "duplicate", not "succeeded":
// the replay applied nothing. The dead letter counts as resolved all the
// same (its message's effect exists).
func TestReplayOfAppliedMessageSettledDuplicate(t *testing.T) {
	t.Parallel()
	b, runs, charge := chargeDeadLettered(t, idem.Config{}, false)
	// A late copy of the same message arrives and is applied.
	b.publish(charge)
	b.settle()
	if runs.Load() != 1 {
		t.Fatalf("runs %d after the late copy, want 1", runs.Load())
	}
	if err := b.engine().ReplayDeadLetter(b.ctx, "charge-1"); err != nil {
		t.Fatal(err)
	}
	b.settle()
	if runs.Load() != 1 {
		t.Errorf("runs %d after the replay, want 1: the replayed copy is a duplicate", runs.Load())
	}
	dls := b.deadLetters()
	if len(dls) != 1 || len(dls[0].Replays) != 1 {
		t.Fatalf("dead letters %+v, want charge-1 with one replay", dls)
	}
	if r := dls[0].LastReplay(); r.Outcome != store.ReplayDuplicate || r.SettledAt.IsZero() {
		t.Errorf("replay settled %q at %v, want %q with its time: the replayed copy applied nothing", r.Outcome, r.SettledAt, store.ReplayDuplicate)
	}
	if st := dls[0].State(); st != store.DeadLettersResolved {
		t.Errorf("dead letter state %q, want %q: its message's effect exists", st, store.DeadLettersResolved)
	}
	if err := b.engine().ReplayDeadLetter(b.ctx, "charge-1"); !errors.Is(err, idem.ErrReplaySucceeded) {
		t.Errorf("replay again: got error %v, want one wrapping idem.ErrReplaySucceeded (the message was applied)", err)
	}
}

// With Config.Dedup token, a replayed copy whose token an earlier copy
// claimed is settled "duplicate", even once the inbox forgot that copy.
func TestReplayOfTokenClaimedMessageSettledDuplicate(t *testing.T) {
	t.Parallel()
	b, runs, charge := chargeDeadLettered(t, idem.Config{Dedup: idem.DedupToken}, true)
	publishCharge(t, b, charge, true) // a late copy: applied, and claims the token
	b.settle()
	// Retention passes: the inbox forgets the late copy; only the claimed
	// token says it was applied.
	if _, err := b.mstore.Sweep(b.ctx, &store.SweepParams{InboxBefore: time.Now().Add(30 * 24 * time.Hour), Limit: 1000}); err != nil {
		t.Fatal(err)
	}
	if err := b.engine().ReplayDeadLetter(b.ctx, "charge-1"); err != nil {
		t.Fatal(err)
	}
	b.settle()
	if runs.Load() != 1 {
		t.Errorf("runs %d, want 1: the replayed copy's token was claimed", runs.Load())
	}
	dls := b.deadLetters()
	if len(dls) != 1 || dls[0].LastReplay() == nil || dls[0].LastReplay().Outcome != store.ReplayDuplicate {
		t.Errorf("dead letters %+v, want charge-1's replay settled %q", dls, store.ReplayDuplicate)
	}
}

// chargeDeadLettered runs, with cfg, a handler of "charge" that fails
// permanently until charge-1 is dead-lettered, and then applies every
// message it gets, counting them in runs; charge is charge-1's envelope,
// with a dedup token minted for it when tokened.
func chargeDeadLettered(t *testing.T, cfg idem.Config, tokened bool) (b *bundle, runs *atomic.Int64, charge idem.Envelope) {
	t.Helper()
	runs = new(atomic.Int64)
	var broken atomic.Bool
	broken.Store(true)
	b = setup(t, &options{cfg: cfg, handlers: map[string]idem.HandlerFunc{"charge": func(ctx context.Context, env idem.Envelope) error {
		if broken.Load() {
			return idem.Permanent(errors.New("card service misconfigured"))
		}
		runs.Add(1)
		return nil
	}}})
	charge = idem.Envelope{ID: "charge-1", Type: "charge", Body: []byte(`{}`)}
	publishCharge(t, b, charge, tokened)
	b.settle()
	broken.Store(false)
	return b, runs, charge
}

// publishCharge publishes charge, with a dedup token when tokened.
func publishCharge(t *testing.T, b *bundle, charge idem.Envelope, tokened bool) {
	t.Helper()
	if !tokened {
		b.publish(charge)
		return
	}
	if err := b.engine().PublishWithTokens(b.ctx, charge); err != nil {
		t.Fatal(err)
	}
}

package idem_test

import (
	"errors"
	"testing"

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

package storetest

import (
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// replayDupCases are the contract lines of a replayed copy found already
// applied: its replay is settled store.ReplayDuplicate, in the commit that
// consumes it, beside the replays that succeeded.
var replayDupCases = []testCase{
	{"DeadLetterReplayDuplicateInCommit", testReplayDuplicateInCommit},
	{"DeadLetterReplayDuplicateSettled", testReplayDuplicateSettled},
}

func init() { deadLetterReplayerCases = append(deadLetterReplayerCases, replayDupCases...) }

// testReplayDuplicateInCommit: one commit settles one dead letter's
// replay as succeeded (Changes.SettleReplays) and another's as duplicate
// (Changes.SettleDuplicates); both dead letters are then resolved.
func testReplayDuplicateInCommit(t *testing.T, s store.Store) {
	ctx := t.Context()
	rp := s.(store.DeadLetterReplayer)
	t0 := now().Add(-time.Hour)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{deadLetterAt("d-1", "unknown_type", "e", t0), deadLetterAt("d-2", "unknown_type", "e", t0)}})
	r := t0.Add(time.Minute)
	for _, id := range []string{"d-1", "d-2"} {
		if err := rp.BeginReplay(ctx, id, r); err != nil {
			t.Fatalf("begin replay of %s: got error %v, want nil", id, err)
		}
	}
	done := r.Add(time.Second)
	dup := &store.Changes{SettleDuplicates: &store.SettleReplaysParams{IDs: []string{"d-2", "no-such-id", "k\x00"}, Outcome: store.ReplayDuplicate, At: done}}
	if dup.Empty() {
		t.Fatalf("changes that settle duplicate replays: Empty() = true, want false (the engine would skip the commit)")
	}
	dup.SettleReplays = &store.SettleReplaysParams{IDs: []string{"d-1"}, Outcome: store.ReplaySucceeded, At: done}
	commit(t, s, dup)
	checkReplays(t, "d-1 settled succeeded in a commit", getDeadLetter(t, s, "d-1").Replays, []store.Replay{{At: r, Outcome: store.ReplaySucceeded, SettledAt: done}})
	d2 := getDeadLetter(t, s, "d-2")
	checkReplays(t, "d-2 settled duplicate in the same commit", d2.Replays, []store.Replay{{At: r, Outcome: store.ReplayDuplicate, SettledAt: done}})
	if st := d2.State(); st != store.DeadLettersResolved {
		t.Errorf("d-2 state %q, want %q: a duplicate replay means its message was applied", st, store.DeadLettersResolved)
	}
}

// testReplayDuplicateSettled: DeadLetterReplayer.SettleReplays records the
// duplicate outcome as it is, and it settles the replay for good.
func testReplayDuplicateSettled(t *testing.T, s store.Store) {
	ctx := t.Context()
	rp := s.(store.DeadLetterReplayer)
	t0 := now().Add(-time.Hour)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{deadLetterAt("d-1", "unknown_type", "e", t0)}})
	r := t0.Add(time.Minute)
	if err := rp.BeginReplay(ctx, "d-1", r); err != nil {
		t.Fatalf("begin replay of d-1: got error %v, want nil", err)
	}
	done := r.Add(time.Second)
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"d-1"}, Outcome: store.ReplayDuplicate, At: done}); err != nil {
		t.Fatalf("settle d-1 as duplicate: got error %v, want nil", err)
	}
	want := []store.Replay{{At: r, Outcome: store.ReplayDuplicate, SettledAt: done}}
	checkReplays(t, "d-1 duplicate", getDeadLetter(t, s, "d-1").Replays, want)
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"d-1"}, Outcome: store.ReplaySucceeded, At: done.Add(time.Second)}); err != nil {
		t.Fatalf("settle d-1 again: got error %v, want nil", err)
	}
	checkReplays(t, "d-1 duplicate, settled again", getDeadLetter(t, s, "d-1").Replays, want)
}

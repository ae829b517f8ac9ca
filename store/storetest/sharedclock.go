package storetest

import (
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// skew is how far ahead the clock of the second replica of Features.SharedClock
// runs: the three minutes of the acceptance run that found replicas
// taking back each other's claims.
const skew = 3 * time.Minute

// runSharedClock runs the cases of Features.SharedClock: a store that
// several processes share measures claim leases on one clock they all see
// (the database's), not on ClaimParams.Now, so a replica whose clock runs
// ahead does not take back a timer or outbox claim another replica still
// holds, and a lease, once it has passed on the shared clock, ends for
// every replica.
func runSharedClock(t *testing.T, newPair func(t *testing.T) (a, b store.Store)) {
	t.Helper()
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, a, b store.Store)
	}{
		{"TimerClaimHeldAgainstClockAhead", testTimerClaimHeldAgainstClockAhead},
		{"OutboxClaimHeldAgainstClockAhead", testOutboxClaimHeldAgainstClockAhead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, b := newPair(t)
			for _, s := range []store.Store{a, b} {
				t.Cleanup(func() {
					if err := s.Close(); err != nil {
						t.Errorf("close: got error %v, want nil", err)
					}
				})
			}
			tc.fn(t, a, b)
		})
	}
}

func testTimerClaimHeldAgainstClockAhead(t *testing.T, a, b store.Store) {
	base := now()
	commit(t, a, &store.Changes{Timers: []store.Timer{timer("order", "o-1", "expire", "t-1", base.Add(-time.Minute))}})
	got := claimTimers(t, a, store.ClaimParams{Now: base, Limit: 10, Lease: time.Minute})
	checkStrings(t, "claim by the first replica", timerIDs(got), []string{"t-1"})
	got = claimTimers(t, b, store.ClaimParams{Now: base.Add(skew), Limit: 10, Lease: time.Minute})
	checkStrings(t, "claim by a replica whose clock is 3m ahead, within the first one's 1m lease", timerIDs(got), nil)

	// A lease that passed on the shared clock has ended for every replica,
	// whatever its own clock says.
	commit(t, a, &store.Changes{Timers: []store.Timer{timer("order", "o-2", "expire", "t-2", base.Add(-time.Minute))}})
	got = claimTimers(t, a, store.ClaimParams{Now: base, Limit: 10, Lease: shortLease})
	checkStrings(t, "short claim by the first replica", timerIDs(got), []string{"t-2"})
	waitOut(shortLease)
	got = claimTimers(t, b, store.ClaimParams{Now: base, Limit: 10, Lease: time.Minute})
	checkStrings(t, "claim by the second replica after the short lease", timerIDs(got), []string{"t-2"})
}

func testOutboxClaimHeldAgainstClockAhead(t *testing.T, a, b store.Store) {
	base := now()
	commit(t, a, &store.Changes{Outbox: []store.OutboxMessage{{Envelope: envelope("o-1", base), CreatedAt: base.Add(-time.Minute)}}})
	got := claimOutbox(t, a, store.ClaimParams{Now: base, Limit: 10, Lease: time.Minute, CreatedBefore: base})
	checkStrings(t, "claim by the first replica", outboxIDs(got), []string{"o-1"})
	got = claimOutbox(t, b, store.ClaimParams{Now: base.Add(skew), Limit: 10, Lease: time.Minute, CreatedBefore: base.Add(skew)})
	checkStrings(t, "claim by a replica whose clock is 3m ahead, within the first one's 1m lease", outboxIDs(got), nil)

	commit(t, a, &store.Changes{Outbox: []store.OutboxMessage{{Envelope: envelope("o-2", base), CreatedAt: base.Add(-time.Minute)}}})
	got = claimOutbox(t, a, store.ClaimParams{Now: base, Limit: 10, Lease: shortLease, CreatedBefore: base})
	checkStrings(t, "short claim by the first replica", outboxIDs(got), []string{"o-2"})
	waitOut(shortLease)
	got = claimOutbox(t, b, store.ClaimParams{Now: base, Limit: 10, Lease: time.Minute, CreatedBefore: base})
	checkStrings(t, "claim by the second replica after the short lease", outboxIDs(got), []string{"o-2"})
}

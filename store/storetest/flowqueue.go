package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// The FlowQueue cases check store.AdmittingQueue (Features.Admit): a queue
// that admits under limits in the transaction that leases the work.

func init() {
	featureCases = append(featureCases,
		featureCase{"FlowQueueCapLeavesRefusedUntouched", needAdmit, testFlowQueueCapLeavesRefusedUntouched},
		featureCase{"FlowQueueSettleReleases", needAdmit, testFlowQueueSettleReleases},
		featureCase{"FlowQueueLeaseExpiryReleases", needAdmit, testFlowQueueLeaseExpiryReleases},
		featureCase{"FlowQueuePerKeyOrder", needAdmit, testFlowQueuePerKeyOrder},
		featureCase{"FlowQueueExtendLeasesExtendsHolds", needAdmit, testFlowQueueExtendLeasesExtendsHolds},
		featureCase{"FlowQueuePlainDeliveriesUntouched", needAdmit, testFlowQueuePlainDeliveriesUntouched},
		featureCase{"FlowQueueConcurrentNeverOverCap", needAdmit, testFlowQueueConcurrentNeverOverCap},
		featureCase{"FlowQueueExpiredHoldIsLost", needAdmit, testFlowQueueExpiredHoldIsLost},
		featureCase{"FlowQueueLooksPastRefusedWindow", needAdmit, testFlowQueueLooksPastRefusedWindow},
		featureCase{"FlowQueueLostLeaseKeepsHoldExpiry", needAdmit, testFlowQueueLostLeaseKeepsHoldExpiry},
		featureCase{"FlowQueueCoveringFullStopsPaging", needAdmit, testFlowQueueCoveringFullStopsPaging},
	)
}

// needsHeader lists, comma-separated, the limit names (unpartitioned
// counters) a test message needs.
const needsHeader = "x-test-needs"

// needsOf is the ReceiveParams.Needs of the FlowQueue cases.
func needsOf(env *transport.Envelope) []store.LimitKey {
	v := env.Headers[needsHeader]
	if v == "" {
		return nil
	}
	var ks []store.LimitKey
	for _, n := range strings.Split(v, ",") {
		ks = append(ks, lk(n, ""))
	}
	return ks
}

// limited returns a message of saga key corr that needs the limits in
// needs (comma-separated).
func limited(id, corr, needs string) transport.Envelope {
	env := message(id, corr)
	if needs != "" {
		env.Headers[needsHeader] = needs
	}
	return env
}

func admittingOf(t *testing.T, s store.Store) store.AdmittingQueue {
	t.Helper()
	q, ok := s.(store.AdmittingQueue)
	if !ok {
		t.Fatalf("Features.Admit is true but %T is not a store.AdmittingQueue", s)
	}
	return q
}

// receiveAdmitted calls ReceiveAdmitted once, waiting at most wait.
func receiveAdmitted(t *testing.T, q store.AdmittingQueue, lim map[string]store.Limit, max int, wait time.Duration) []transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	ds, err := q.ReceiveAdmitted(ctx, &store.ReceiveParams{Max: max, Limits: lim, Needs: needsOf})
	if err != nil {
		t.Fatalf("receive admitted: got error %v, want deliveries within %v", err, wait)
	}
	return ds
}

// expectNoAdmission fails the test if ReceiveAdmitted returns a delivery
// within wait.
func expectNoAdmission(t *testing.T, q store.AdmittingQueue, lim map[string]store.Limit, what string, wait time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	ds, err := q.ReceiveAdmitted(ctx, &store.ReceiveParams{Max: 10, Limits: lim, Needs: needsOf})
	switch {
	case err == nil:
		t.Fatalf("%s: got %s, want no admission within %v", what, describe(ds), wait)
	case !errors.Is(err, context.DeadlineExceeded):
		t.Fatalf("%s: receive admitted: got error %v, want context.DeadlineExceeded", what, err)
	}
}

func wantIDs(t *testing.T, what string, ds []transport.Delivery, attempt int, ids ...string) {
	t.Helper()
	got := idsOf(ds)
	slices.Sort(got)
	if !slices.Equal(got, ids) {
		t.Fatalf("%s: got %s, want %v", what, describe(ds), ids)
	}
	for _, d := range ds {
		if d.Attempt != attempt {
			t.Errorf("%s: %s has attempt %d, want %d", what, d.Envelope.ID, d.Attempt, attempt)
		}
	}
}

var apiCap1 = limits(store.Limit{Name: "api", Concurrency: 1})

func testFlowQueueCapLeavesRefusedUntouched(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	publish(t, q, limited("m-1", "k-1", "api"), limited("m-2", "k-2", "api"), limited("m-3", "k-3", "api"))
	wantIDs(t, "cap 1 over 3 keys", receiveAdmitted(t, q, apiCap1, 10, promptWait), 1, "m-1")
	if n := inFlight(t, q, lk("api", "")); n != 1 {
		t.Errorf("in flight: got %d, want 1", n)
	}
	// The refused messages were not leased: a plain receive gets them at
	// once, their attempt not counted.
	wantIDs(t, "the refused ones", receive(t, q, 2, promptWait), 1, "m-2", "m-3")
}

func testFlowQueueSettleReleases(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	ctx := t.Context()
	api := lk("api", "")
	publish(t, q, limited("m-1", "k-1", "api"), limited("m-2", "k-2", "api"), limited("m-3", "k-3", "api"), limited("m-4", "k-4", "api"))
	d1 := receiveAdmitted(t, q, apiCap1, 10, promptWait)
	wantIDs(t, "first", d1, 1, "m-1")

	uow := queueUnit(t, s)
	if err := uow.Consume(ctx, d1); err != nil {
		t.Fatalf("consume: %v", err)
	}
	if err := uow.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := inFlight(t, q, api); n != 1 {
		t.Fatalf("in flight after a rolled-back Consume: got %d, want 1", n)
	}
	uow = queueUnit(t, s)
	if err := uow.Consume(ctx, d1); err != nil {
		t.Fatalf("consume: %v", err)
	}
	if err := uow.Commit(ctx, &store.Changes{}); err != nil {
		t.Fatalf("commit consuming %s: %v", d1[0].Envelope.ID, err)
	}
	// Checked at once: a lease's expiry would release the hold later.
	if n := inFlight(t, q, api); n != 0 {
		t.Fatalf("in flight after a committed Consume: got %d, want 0", n)
	}
	d2 := receiveAdmitted(t, q, apiCap1, 10, promptWait)
	wantIDs(t, "after Consume", d2, 1, "m-2")
	if err := q.Nack(ctx, d2[0], time.Hour); err != nil {
		t.Fatalf("nack: %v", err)
	}
	if n := inFlight(t, q, api); n != 0 {
		t.Fatalf("in flight after a Nack: got %d, want 0", n)
	}
	d3 := receiveAdmitted(t, q, apiCap1, 10, promptWait)
	wantIDs(t, "after Nack", d3, 1, "m-3")
	ackAll(t, q, d3)
	if n := inFlight(t, q, api); n != 0 {
		t.Fatalf("in flight after an Ack: got %d, want 0", n)
	}
	wantIDs(t, "after Ack", receiveAdmitted(t, q, apiCap1, 10, promptWait), 1, "m-4")
}

func testFlowQueueLeaseExpiryReleases(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	publish(t, q, limited("m-1", "k-1", "api"), limited("m-2", "k-2", "api"))
	wantIDs(t, "first", receiveAdmitted(t, q, apiCap1, 10, promptWait), 1, "m-1")
	// Unsettled: once its lease runs out, its hold is released and the
	// next receive admits again (m-1 again, first in order, or m-2).
	ds := receiveAdmitted(t, q, apiCap1, 10, f.redeliveryWait())
	if len(ds) != 1 {
		t.Fatalf("after the lease expired: got %s, want one delivery", describe(ds))
	}
	if n := inFlight(t, q, lk("api", "")); n != 1 {
		t.Errorf("in flight: got %d, want 1", n)
	}
}

func testFlowQueuePerKeyOrder(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	slow := limits(store.Limit{Name: "slow", Rate: 0.001, Burst: 1})
	publish(t, q, limited("m-0", "k-0", "slow"))
	wantIDs(t, "the only token", receiveAdmitted(t, q, slow, 10, promptWait), 1, "m-0")
	publish(t, q, limited("m-1", "k", "slow"), limited("m-2", "k", ""), limited("m-3", "other", ""))
	// m-1 waits for a token; m-2, of its key, must not overtake it.
	wantIDs(t, "behind a refusal by a rate", receiveAdmitted(t, q, slow, 10, promptWait), 1, "m-3")
	wantIDs(t, "left untouched", receive(t, q, 2, promptWait), 1, "m-1", "m-2")
}

func testFlowQueueExtendLeasesExtendsHolds(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	lx, ok := s.(transport.LeaseExtender)
	if !ok {
		t.Skipf("%T is not a transport.LeaseExtender", s)
	}
	publish(t, q, limited("m-1", "k-1", "api"), limited("m-2", "k-2", "api"))
	d1 := receiveAdmitted(t, q, apiCap1, 10, promptWait)
	wantIDs(t, "first", d1, 1, "m-1")
	for end := time.Now().Add(2 * f.Lease); time.Now().Before(end); {
		if err := lx.ExtendLeases(t.Context(), d1); err != nil {
			t.Fatalf("extend leases: %v", err)
		}
		time.Sleep(f.Lease / 4) // the renewal period, as the engine's
	}
	if n := inFlight(t, q, lk("api", "")); n != 1 {
		t.Fatalf("in flight after 2 leases of renewals: got %d, want 1", n)
	}
	expectNoAdmission(t, q, apiCap1, "while the renewed hold lives", f.Lease/2)
	ackAll(t, q, d1)
	wantIDs(t, "after Ack", receiveAdmitted(t, q, apiCap1, 10, promptWait), 1, "m-2")
}

// testFlowQueuePlainDeliveriesUntouched checks that the deliveries of a
// plain Receive take no hold and that settling them releases none.
func testFlowQueuePlainDeliveriesUntouched(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	publish(t, q, limited("m-1", "k-1", "api"))
	d1 := receiveAdmitted(t, q, apiCap1, 10, promptWait)
	publish(t, q, limited("p-1", "k-2", "api"))
	p1 := receive(t, q, 1, promptWait)
	wantIDs(t, "plain receive", p1, 1, "p-1")
	ackAll(t, q, p1)
	if n := inFlight(t, q, lk("api", "")); n != 1 {
		t.Fatalf("in flight after a plain Ack: got %d, want 1 (m-1's hold)", n)
	}
	ackAll(t, q, d1)
	if n := inFlight(t, q, lk("api", "")); n != 0 {
		t.Fatalf("in flight after m-1's Ack: got %d, want 0", n)
	}
}

// testFlowQueueConcurrentNeverOverCap runs 4 consumers of one queue under
// a cap of 2: each admitted delivery counts in flight until its Ack, and
// never more than 2 are.
func testFlowQueueConcurrentNeverOverCap(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	const total, cap2 = 40, 2
	var envs []transport.Envelope
	for i := range total {
		envs = append(envs, limited(fmt.Sprintf("m-%02d", i), fmt.Sprintf("k-%02d", i), "api"))
	}
	publish(t, q, envs...)
	lim := limits(store.Limit{Name: "api", Concurrency: cap2})
	ctx, cancel := context.WithTimeout(t.Context(), 4*promptWait)
	defer cancel()
	var live, peak, acked atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- flowConsumer(ctx, cancel, q, lim, total, &live, &peak, &acked)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if n := acked.Load(); n != total {
		t.Fatalf("acked %d of %d within %v", n, total, 4*promptWait)
	}
	if p := peak.Load(); p > cap2 {
		t.Errorf("peak in flight: got %d, want at most %d", p, cap2)
	}
	if n := inFlight(t, q, lk("api", "")); n != 0 {
		t.Errorf("in flight at the end: got %d, want 0", n)
	}
}

// flowConsumer receives admitted deliveries and acks them one by one
// until total are acked, then cancels the others' waits.
func flowConsumer(ctx context.Context, cancel func(), q store.AdmittingQueue, lim map[string]store.Limit, total int64, live, peak, acked *atomic.Int64) error {
	for acked.Load() < total {
		ds, err := q.ReceiveAdmitted(ctx, &store.ReceiveParams{Max: 3, Limits: lim, Needs: needsOf})
		if err != nil {
			if acked.Load() >= total {
				return nil
			}
			return fmt.Errorf("receive admitted after %d acks: %w", acked.Load(), err)
		}
		for range ds {
			n := live.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
		}
		for _, d := range ds {
			live.Add(-1)
			if err := q.Ack(ctx, []transport.Delivery{d}); err != nil {
				return fmt.Errorf("ack %s: %w", d.Envelope.ID, err)
			}
			if acked.Add(1) >= total {
				cancel()
			}
		}
	}
	return nil
}

// testFlowQueueExpiredHoldIsLost is the overlap of a lease that expires
// before its renewal (Inngest #4766): under a cap of 1, m-1's worker
// stalls past the Lease and m-2 is admitted in its place. m-1's delivery
// is then lost: its extension, its unit of work's Consume, its Nack and
// its Ack are refused with transport.ErrLeaseLost, and m-1 stays in the
// queue, so that m-1 and m-2 are never both in flight.
func testFlowQueueExpiredHoldIsLost(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	ctx := t.Context()
	publish(t, q, limited("m-1", "k-1", "api"), limited("m-2", "k-2", "api"))
	d1 := receiveAdmitted(t, q, apiCap1, 1, promptWait)
	wantIDs(t, "first", d1, 1, "m-1")
	// Waits until m-1's lease and hold have passed: m-2 comes first in
	// the queue's order (m-1's row is visible from its lease's end).
	d2 := receiveAdmitted(t, q, apiCap1, 1, f.redeliveryWait())
	wantIDs(t, "once m-1's lease passed", d2, 1, "m-2")
	if lx, ok := s.(transport.LeaseExtender); ok {
		if err := lx.ExtendLeases(ctx, d1); !errors.Is(err, transport.ErrLeaseLost) {
			t.Errorf("extend m-1's expired lease after m-2's admission: got %v, want ErrLeaseLost", err)
		}
	}
	uow := queueUnit(t, s)
	if err := uow.Consume(ctx, d1); err != nil {
		uow.Rollback(ctx)
		t.Fatalf("consume: %v", err)
	}
	if err := uow.Commit(ctx, &store.Changes{}); !errors.Is(err, transport.ErrLeaseLost) {
		t.Errorf("commit consuming m-1 after m-2's admission: got %v, want ErrLeaseLost", err)
	}
	if err := q.Nack(ctx, d1[0], 0); !errors.Is(err, transport.ErrLeaseLost) {
		t.Errorf("nack m-1 after m-2's admission: got %v, want ErrLeaseLost", err)
	}
	if err := q.Ack(ctx, d1); !errors.Is(err, transport.ErrLeaseLost) {
		t.Errorf("ack m-1 after m-2's admission: got %v, want ErrLeaseLost", err)
	}
	if n := inFlight(t, q, lk("api", "")); n != 1 {
		t.Errorf("in flight: got %d, want 1 (m-2's hold)", n)
	}
	ackAll(t, q, d2)
	// m-1 was not settled: it is admitted again, as attempt 2.
	wantIDs(t, "m-1 again", receiveAdmitted(t, q, apiCap1, 1, promptWait), 2, "m-1")
}

// testFlowQueueLooksPastRefusedWindow checks that a full window of
// refused messages does not hide the messages behind it: under a cap of 1
// that binds, with Max 1, five refused messages of the capped counter
// come first, then an unlimited message and one of another counter
// (whose name sorts before the capped one's); both are admitted.
func testFlowQueueLooksPastRefusedWindow(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	lim := limits(store.Limit{Name: "api", Concurrency: 1}, store.Limit{Name: "aaa", Concurrency: 5})
	// The cap is taken for the whole test by a hold that no lease ends.
	adm, err := q.Admit(t.Context(), &store.AdmitParams{Limits: lim, TTL: time.Hour,
		Requests: []store.AdmitRequest{{Holder: "h-0", Keys: []store.LimitKey{lk("api", "")}}}})
	if err != nil || len(adm) != 1 || !adm[0].Admitted {
		t.Fatalf("admit h-0: got %v, %v, want it admitted", adm, err)
	}
	var envs []transport.Envelope
	for i := range 5 {
		envs = append(envs, limited(fmt.Sprintf("r-%d", i), fmt.Sprintf("k-r%d", i), "api"))
	}
	publish(t, q, envs...)
	publish(t, q, limited("b-1", "k-b1", ""))
	publish(t, q, limited("b-2", "k-b2", "aaa"))
	wantIDs(t, "behind five refused", receiveAdmitted(t, q, lim, 1, promptWait), 1, "b-1")
	wantIDs(t, "behind five refused, another counter", receiveAdmitted(t, q, lim, 1, promptWait), 1, "b-2")
	if n := inFlight(t, q, lk("api", "")); n != 1 {
		t.Errorf("in flight on api: got %d, want 1 (h-0's hold)", n)
	}
	if n := inFlight(t, q, lk("aaa", "")); n != 1 {
		t.Errorf("in flight on aaa: got %d, want 1 (b-2's hold)", n)
	}
}

// testFlowQueueCoveringFullStopsPaging checks ReceiveParams.Covering:
// with the cap of a covering limit full, a receive looks at no window
// after the first, so the unlimited message behind five refused ones (a
// message the caller, by its Covering, does not consume) is left; and
// once the cap has room, the refused messages are admitted in order, the
// receive stopping at the page that filled the cap again.
func testFlowQueueCoveringFullStopsPaging(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	lim := limits(store.Limit{Name: "api", Concurrency: 2})
	adm, err := q.Admit(t.Context(), &store.AdmitParams{Limits: lim, TTL: time.Hour,
		Requests: []store.AdmitRequest{{Holder: "h-0", Keys: []store.LimitKey{lk("api", "")}}, {Holder: "h-1", Keys: []store.LimitKey{lk("api", "")}}}})
	if err != nil || len(adm) != 2 || !adm[0].Admitted || !adm[1].Admitted {
		t.Fatalf("admit h-0 and h-1: got %v, %v, want both admitted", adm, err)
	}
	var envs []transport.Envelope
	for i := range 5 {
		envs = append(envs, limited(fmt.Sprintf("r-%d", i), fmt.Sprintf("k-r%d", i), "api"))
	}
	publish(t, q, envs...)
	publish(t, q, limited("b-1", "k-b1", ""))
	covering := func(max int, wait time.Duration) ([]transport.Delivery, error) {
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		defer cancel()
		return q.ReceiveAdmitted(ctx, &store.ReceiveParams{Max: max, Limits: lim, Needs: needsOf, Covering: []string{"api"}})
	}
	ds, err := covering(1, 300*time.Millisecond)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("covering cap full: got %s, %v, want no admission (no window after the first)", describe(ds), err)
	}
	if err := q.ReleaseHolds(t.Context(), []string{"h-0"}); err != nil {
		t.Fatalf("release h-0: %v", err)
	}
	ds, err = covering(3, promptWait)
	if err != nil {
		t.Fatalf("covering cap with one slot: %v", err)
	}
	wantIDs(t, "covering cap with one slot, Max 3", ds, 1, "r-0")
	if err := q.ReleaseHolds(t.Context(), []string{"h-1", ds[0].Token}); err != nil {
		t.Fatalf("release h-1 and r-0: %v", err)
	}
	if err := q.Ack(t.Context(), ds[:1]); err != nil {
		t.Fatalf("ack r-0: %v", err)
	}
	ds, err = covering(1, promptWait)
	if err != nil {
		t.Fatalf("covering cap with two slots, Max 1: %v", err)
	}
	wantIDs(t, "covering cap with two slots, Max 1", ds, 1, "r-1")
}

// testFlowQueueLostLeaseKeepsHoldExpiry checks that an extension of a
// delivery whose lease was lost extends none of its holds: m-1's hold is
// made to outlive its lease by half a lease (ExtendHolds), m-1 is
// received again once its lease passed, and the lost delivery's
// extension, refused, must leave the hold to expire when it would have,
// not a whole lease after the extension (which held a slot for nothing:
// under-admission).
func testFlowQueueLostLeaseKeepsHoldExpiry(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	lx, ok := s.(transport.LeaseExtender)
	if !ok {
		t.Skipf("%T is not a transport.LeaseExtender", s)
	}
	ctx := t.Context()
	api := lk("api", "")
	publish(t, q, limited("m-1", "k-1", "api"))
	d1 := receiveAdmitted(t, q, apiCap1, 1, promptWait)
	wantIDs(t, "first", d1, 1, "m-1")
	if err := q.ExtendHolds(ctx, []string{d1[0].Token}, f.Lease+f.Lease/2); err != nil {
		t.Fatalf("extend m-1's hold: %v", err)
	}
	holdEnd := time.Now().Add(f.Lease + f.Lease/2)
	// Returns once m-1's lease has passed: its first delivery is lost.
	wantIDs(t, "m-1 once its lease passed", receive(t, q, 1, f.redeliveryWait()), 2, "m-1")
	if err := lx.ExtendLeases(ctx, d1); !errors.Is(err, transport.ErrLeaseLost) {
		t.Fatalf("extend m-1's lost lease: got %v, want ErrLeaseLost", err)
	}
	// Extended, the hold would live until a lease after the extension,
	// at least half a lease after holdEnd.
	deadline := holdEnd.Add(f.Lease / 4)
	for inFlight(t, q, api) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("m-1's hold still lives %v after it was due to expire: the lost delivery's extension extended it", time.Since(holdEnd).Round(time.Millisecond))
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// The subtests of a queue whose units of work claim (Features.Claim): the
// engine takes a batch inside the unit of work that applies it, so the
// claim commits or rolls back with the state.

// claimUnit begins a unit of work and returns it as a ClaimUnitOfWork.
func claimUnit(t *testing.T, s store.Store) store.ClaimUnitOfWork {
	t.Helper()
	uow := begin(t, s)
	// Rolled back however the test ends (a no-op after Commit or
	// Rollback): the store's Close may wait for its connection.
	t.Cleanup(func() { _ = uow.Rollback(context.Background()) })
	c, ok := uow.(store.ClaimUnitOfWork)
	if !ok {
		t.Fatalf("unit of work %T is not a store.ClaimUnitOfWork", uow)
	}
	return c
}

// claimIn claims up to n messages of partition part of parts in u. A
// claim must not wait for other units of work: it fails after promptWait.
func claimIn(t *testing.T, u store.ClaimUnitOfWork, n, part, parts int) []transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), promptWait)
	defer cancel()
	ds, err := u.Claim(ctx, n, part, parts)
	if err != nil {
		t.Fatalf("claim %d of partition %d/%d: got error %v, want nil", n, part, parts, err)
	}
	if len(ds) > n {
		t.Fatalf("claim %d: got %d deliveries", n, len(ds))
	}
	return ds
}

// claimAll claims up to n messages of every partition in a unit of work of
// its own and rolls it back.
func claimAll(t *testing.T, s store.Store, n int) []transport.Delivery {
	t.Helper()
	u := claimUnit(t, s)
	defer rollback(t, u)
	return claimIn(t, u, n, 0, 1)
}

func rollback(t *testing.T, u store.UnitOfWork) {
	t.Helper()
	if err := u.Rollback(t.Context()); err != nil {
		t.Errorf("rollback: got error %v, want nil", err)
	}
}

func idsOf(ds []transport.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Envelope.ID
	}
	return out
}

// checkClaimed fails unless ds are the messages ids in that order, each at
// attempt.
func checkClaimed(t *testing.T, what string, ds []transport.Delivery, attempt int, ids ...string) {
	t.Helper()
	if !slices.Equal(idsOf(ds), ids) {
		t.Fatalf("%s: got %s, want %v in that order", what, describe(ds), ids)
	}
	for _, d := range ds {
		if d.Attempt != attempt {
			t.Errorf("%s: %s at attempt %d, want %d", what, d.Envelope.ID, d.Attempt, attempt)
		}
	}
}

func testClaimSettlesOnCommit(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	ctx := t.Context()
	base := now()
	sent := []transport.Envelope{message("m-1", "k-1"), message("m-2", "k-2"), message("m-3", "k-3")}
	publish(t, q, sent...)

	u := claimUnit(t, s)
	ds := claimIn(t, u, 10, 0, 1)
	checkClaimed(t, "claim of three published messages", ds, 1, "m-1", "m-2", "m-3")
	for i := range ds {
		checkEnvelope(t, "claimed "+ds[i].Envelope.ID, ds[i].Envelope, sent[i])
	}
	// While the unit of work is open, nobody else gets them. (Visible
	// messages are handed out at once: a short wait shows they are not,
	// and keeps the unit of work well within a lease of idleness, which
	// a store may end; see store.ClaimUnitOfWork.)
	if other := claimAll(t, s, 10); len(other) > 0 {
		t.Fatalf("a second claim while the first is open: got %s, want none", describe(other))
	}
	expectNothing(t, q, "receive while a unit of work holds the claim", f.Lease/4)

	ik := store.InboxKey{SagaType: "order", Key: "k-1", MessageID: "m-1"}
	loadIn(t, u, &store.LoadParams{Keys: []store.Key{key("order", "k-1")}, Inbox: []store.InboxKey{ik}})
	if err := u.Consume(ctx, ds); err != nil {
		t.Fatalf("consume the claimed deliveries: got error %v, want nil", err)
	}
	if err := u.Commit(ctx, &store.Changes{
		Inserts: []*store.Instance{newInstance("order", "k-1", base)},
		Inbox:   []store.InboxEntry{{InboxKey: ik, ProcessedAt: base}},
	}); err != nil {
		t.Fatalf("commit: got error %v, want nil", err)
	}
	rollback(t, u) // after Commit: a no-op
	if loadOne(t, s, key("order", "k-1")) == nil || !seen(t, s, ik) {
		t.Error("instance and inbox record committed with the claim: got absent, want present")
	}
	if again := claimAll(t, s, 10); len(again) > 0 {
		t.Fatalf("a claim after the commit: got %s, want none (the commit settled them)", describe(again))
	}
	expectNothing(t, q, "receive after the commit settled the claimed messages", f.quietWait())
}

func testClaimRollbackReturnsUntouched(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	ctx := t.Context()
	base := now()
	commit(t, s, &store.Changes{Inserts: []*store.Instance{newInstance("order", "taken", base)}})
	publish(t, q, message("m-1", "k-1"), message("m-2", "k-2"))

	u := claimUnit(t, s)
	checkClaimed(t, "first claim", claimIn(t, u, 10, 0, 1), 1, "m-1", "m-2")
	rollback(t, u)
	// Back at once, in place, their attempt not counted.
	checkClaimed(t, "claim after a rollback", claimAll(t, s, 10), 1, "m-1", "m-2")

	// A commit that fails returns them too.
	u = claimUnit(t, s)
	ds := claimIn(t, u, 10, 0, 1)
	if err := u.Consume(ctx, ds); err != nil {
		t.Fatalf("consume: got error %v, want nil", err)
	}
	if err := u.Enqueue(ctx, []transport.Envelope{message("e-1", "k-3")}); err != nil {
		t.Fatalf("enqueue: got error %v, want nil", err)
	}
	err := u.Commit(ctx, &store.Changes{Inserts: []*store.Instance{newInstance("order", "taken", base)}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("commit inserting an existing instance: got error %v, want one wrapping store.ErrConflict", err)
	}
	rollback(t, u)
	got := receive(t, q, 2, promptWait)
	checkClaimed(t, "receive after a failed commit", got, 1, "m-1", "m-2")
	ackAll(t, q, got)
	expectNothing(t, q, "after acking m-1 and m-2 (e-1 was never committed)", f.quietWait())
}

func testClaimUnconsumedRefused(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	ctx := t.Context()
	base := now()
	publish(t, q, message("m-1", "k-1"), message("m-2", "k-2"))

	u := claimUnit(t, s)
	ds := claimIn(t, u, 10, 0, 1)
	checkClaimed(t, "claim", ds, 1, "m-1", "m-2")
	if err := u.Consume(ctx, ds[:1]); err != nil {
		t.Fatalf("consume m-1: got error %v, want nil", err)
	}
	if err := u.Commit(ctx, &store.Changes{Inserts: []*store.Instance{newInstance("order", "k-1", base)}}); err == nil {
		t.Fatal("commit of a unit of work that claimed m-2 and did not consume it: got nil, want an error (m-2 would be lost)")
	}
	rollback(t, u)
	if in := loadOne(t, s, key("order", "k-1")); in != nil {
		t.Errorf("after the refused commit: instance %+v, want none (nothing committed)", in)
	}
	checkClaimed(t, "claim after the refused commit", claimAll(t, s, 10), 1, "m-1", "m-2")
}

func testClaimConcurrentDisjoint(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	ctx := t.Context()
	// Two open units of work: the second skips what the first holds.
	publish(t, q, message("a-1", "k-1"), message("a-2", "k-2"), message("a-3", "k-3"), message("a-4", "k-4"))
	u1, u2 := claimUnit(t, s), claimUnit(t, s)
	d1 := claimIn(t, u1, 2, 0, 1)
	d2 := claimIn(t, u2, 10, 0, 1)
	checkClaimed(t, "first of two open claims", d1, 1, "a-1", "a-2")
	checkClaimed(t, "second of two open claims", d2, 1, "a-3", "a-4")
	for _, c := range []struct {
		u  store.ClaimUnitOfWork
		ds []transport.Delivery
	}{{u1, d1}, {u2, d2}} {
		if err := c.u.Consume(ctx, c.ds); err != nil {
			t.Fatalf("consume: got error %v, want nil", err)
		}
		if err := c.u.Commit(ctx, &store.Changes{}); err != nil {
			t.Fatalf("commit: got error %v, want nil", err)
		}
	}

	// Claimers racing over one backlog take every message exactly once.
	const n, claimers = 60, 4
	var envs []transport.Envelope
	for i := range n {
		envs = append(envs, message(fmt.Sprintf("m-%02d", i), fmt.Sprintf("k-%d", i)))
	}
	publish(t, q, envs...)
	var mu sync.Mutex
	got := map[string]int{}
	errs := make(chan error, claimers)
	var wg sync.WaitGroup
	for range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- claimUntilEmpty(ctx, s, func(ds []transport.Delivery) {
				mu.Lock()
				defer mu.Unlock()
				for _, d := range ds {
					got[d.Envelope.ID]++
				}
			})
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range envs {
		if got[e.ID] != 1 {
			t.Errorf("message %s committed by %d claims, want exactly 1", e.ID, got[e.ID])
		}
	}
	if len(got) != n {
		t.Errorf("claims took %d distinct messages, want %d", len(got), n)
	}
}

// claimUntilEmpty claims 7 messages at a time and commits, reporting each
// committed claim to done, until a claim comes back empty.
func claimUntilEmpty(ctx context.Context, s store.Store, done func([]transport.Delivery)) error {
	for {
		uow, err := s.Begin(ctx)
		if err != nil {
			return fmt.Errorf("begin: %w", err)
		}
		u := uow.(store.ClaimUnitOfWork)
		ds, err := u.Claim(ctx, 7, 0, 1)
		if err == nil && len(ds) > 0 {
			if err = u.Consume(ctx, ds); err == nil {
				err = u.Commit(ctx, &store.Changes{})
			}
		}
		_ = u.Rollback(ctx)
		if err != nil {
			return fmt.Errorf("claim and commit: %w", err)
		}
		if len(ds) == 0 {
			return nil
		}
		done(ds)
	}
}

func testClaimSkipsInvisible(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	ctx := t.Context()
	publish(t, q, message("m-1", "k-1"), message("m-2", "k-2"), message("m-3", "k-3"))
	leased := receive(t, q, 1, promptWait)[0]
	delayed := receive(t, q, 1, promptWait)[0]
	if leased.Envelope.ID != "m-1" || delayed.Envelope.ID != "m-2" {
		t.Fatalf("receive: got %s then %s, want m-1 then m-2", leased.Envelope.ID, delayed.Envelope.ID)
	}
	if err := q.Nack(ctx, delayed, time.Hour); err != nil {
		t.Fatalf("nack m-2 for an hour: got error %v, want nil", err)
	}
	received := time.Now()
	ds := claimAll(t, s, 10)
	if time.Since(received) < f.Lease {
		// Exact only while m-1's lease cannot have ended.
		checkClaimed(t, "claim while m-1 is leased and m-2 delayed", ds, 1, "m-3")
	}
	// Once m-1's lease ends it is claimed (its second delivery); m-2 stays
	// hidden until its delay passes.
	deadline := time.Now().Add(f.redeliveryWait())
	for {
		ds = claimAll(t, s, 10)
		if slices.Contains(idsOf(ds), "m-1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("claim %v after m-1's lease: got %s, want m-1 again", f.redeliveryWait(), describe(ds))
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	if !slices.Equal(idsOf(ds), []string{"m-1", "m-3"}) {
		t.Fatalf("claim after m-1's lease: got %s, want m-1 and m-3 (m-2 is delayed an hour)", describe(ds))
	}
	if ds[0].Attempt != 2 || ds[1].Attempt != 1 {
		t.Errorf("claim after m-1's lease: got %s, want m-1 at attempt 2, m-3 at 1", describe(ds))
	}
}

func testClaimPartitionsAsReceive(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	pc := s.(transport.PartitionedConsumer)
	ctx := t.Context()
	const keys, parts = 12, 4
	var envs []transport.Envelope
	for i := range keys {
		for form, spell := range twinKeys {
			envs = append(envs, message(fmt.Sprintf("m-%d-%d", i, form), spell(i)))
		}
	}
	for i := range 4 {
		envs = append(envs, message(fmt.Sprintf("n-%d", i), ""))
	}
	publish(t, q, envs...)

	claimed := make([][]string, parts)
	total := 0
	for part := range parts {
		u := claimUnit(t, s)
		claimed[part] = idsOf(claimIn(t, u, 100, part, parts))
		rollback(t, u)
		total += len(claimed[part])
	}
	if total != len(envs) {
		t.Fatalf("the partitions' claims took %d of %d messages: %v", total, len(envs), claimed)
	}
	// Each partition's claim took exactly what ReceivePartition hands out.
	for part := range parts {
		var received []string
		for {
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			ds, err := pc.ReceivePartition(rctx, 100, part, parts)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				break // nothing visible for a second: the partition is empty
			}
			if err != nil {
				t.Fatalf("receive partition %d of %d: got error %v, want deliveries or context.DeadlineExceeded", part, parts, err)
			}
			received = append(received, idsOf(ds)...)
			ackAll(t, q, ds)
		}
		slices.Sort(received)
		slices.Sort(claimed[part])
		if !slices.Equal(received, claimed[part]) {
			t.Errorf("partition %d of %d: Claim took %v, ReceivePartition hands out %v", part, parts, claimed[part], received)
		}
	}
}

// A claimed delivery Returned inside the unit of work goes back to the
// queue when it commits, as a Nack after a Receive would put it: its
// attempt counted, visible after its delay. The consumed one is gone.
func testClaimReturnKeepsAttempt(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	ctx := t.Context()
	publish(t, q, message("m-1", "k-1"), message("m-2", "k-2"), message("m-3", "k-3"))

	u := claimUnit(t, s)
	ds := claimIn(t, u, 10, 0, 1)
	checkClaimed(t, "claim", ds, 1, "m-1", "m-2", "m-3")
	if err := u.Consume(ctx, ds[:1]); err != nil {
		t.Fatalf("consume m-1: got error %v, want nil", err)
	}
	if err := u.Return(ctx, ds[1], 0); err != nil {
		t.Fatalf("return m-2: got error %v, want nil", err)
	}
	if err := u.Return(ctx, ds[2], time.Hour); err != nil {
		t.Fatalf("return m-3 for an hour: got error %v, want nil", err)
	}
	if err := u.Return(ctx, ds[0], 0); err == nil {
		t.Fatal("return of m-1, consumed already: got nil, want an error")
	}
	if err := u.Commit(ctx, &store.Changes{}); err != nil {
		t.Fatalf("commit: got error %v, want nil", err)
	}
	// m-2 at once, its claim counted as an attempt; m-3 not within the
	// wait (its hour), m-1 never.
	got := receive(t, q, 1, promptWait)
	checkClaimed(t, "receive after the commit", got, 2, "m-2")
	ackAll(t, q, got)
	expectNothing(t, q, "after acking m-2 (m-1 consumed, m-3 returned for an hour)", f.quietWait())
	if f.Pending {
		ready, unacked, err := q.(transport.PendingCounter).Pending(ctx)
		if err != nil || ready != 0 || unacked != 1 {
			t.Errorf("pending: got %d ready, %d unacked, error %v; want 0, 1 (m-3), nil", ready, unacked, err)
		}
	}
}

// After a Commit the store refused, Lease turns the claim into a lease:
// the deliveries it returns are the claimed ones, at the claim's attempt,
// hidden from others, and settled with the queue's Ack and Nack; the
// failed commit's other writes are gone.
func testClaimLeaseAfterFailedCommit(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	ctx := t.Context()
	base := now()
	commit(t, s, &store.Changes{Inserts: []*store.Instance{newInstance("order", "taken", base)}})
	publish(t, q, message("m-1", "k-1"), message("m-2", "k-2"))

	u := claimUnit(t, s)
	ds := claimIn(t, u, 10, 0, 1)
	if err := u.Consume(ctx, ds); err != nil {
		t.Fatalf("consume: got error %v, want nil", err)
	}
	if err := u.Enqueue(ctx, []transport.Envelope{message("e-1", "k-3")}); err != nil {
		t.Fatalf("enqueue: got error %v, want nil", err)
	}
	err := u.Commit(ctx, &store.Changes{Inserts: []*store.Instance{newInstance("order", "taken", base), newInstance("order", "k-1", base)}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("commit inserting an existing instance: got error %v, want one wrapping store.ErrConflict", err)
	}
	leasedAt := time.Now()
	leased, err := u.Lease(ctx)
	if err != nil {
		t.Fatalf("lease after the refused commit: got error %v, want nil", err)
	}
	checkClaimed(t, "lease", leased, 1, "m-1", "m-2")
	if in := loadOne(t, s, key("order", "k-1")); in != nil {
		t.Errorf("after the refused commit: instance %+v, want none", in)
	}
	expectNothing(t, q, "receive while the lease holds m-1 and m-2 (e-1 was never committed)", f.Lease/4)
	if err := q.Nack(ctx, leased[1], 0); err != nil {
		t.Fatalf("nack the leased m-2: got error %v, want nil", err)
	}
	got := receive(t, q, 1, promptWait)
	held := leased[:1]
	if idsOf(got)[0] == "m-1" && time.Since(leasedAt) >= f.Lease {
		// m-1's lease ran out while a loaded machine ran the steps above:
		// it came back, as a lease allows; not what this case checks.
		t.Logf("m-1's lease of %s ran out before m-2 was received again; acking the redelivered m-1", f.Lease)
		ackAll(t, q, got)
		held = nil
		got = receive(t, q, 1, promptWait)
	}
	checkClaimed(t, "receive after nacking the leased m-2", got, 2, "m-2")
	ackAll(t, q, append(got, held...))
	expectNothing(t, q, "after acking both", f.quietWait())
}

package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// The subtests of a store that is its own queue (Features.Queue): the
// engine settles deliveries and enqueues emissions inside the unit of work
// that changes saga state, so the three commit or fail together.

// queueOf returns s as a store.Queue.
func queueOf(t *testing.T, s store.Store) store.Queue {
	t.Helper()
	q, ok := s.(store.Queue)
	if !ok {
		t.Fatalf("Features.Queue is true but %T is not a store.Queue", s)
	}
	return q
}

// queueUnit begins a unit of work and returns it as a QueueUnitOfWork.
func queueUnit(t *testing.T, s store.Store) store.QueueUnitOfWork {
	t.Helper()
	uow := begin(t, s)
	q, ok := uow.(store.QueueUnitOfWork)
	if !ok {
		uow.Rollback(t.Context())
		t.Fatalf("unit of work %T is not a store.QueueUnitOfWork", uow)
	}
	return q
}

// message returns a queue message of saga key corr.
func message(id, corr string) transport.Envelope {
	env := envelope(id, now())
	env.CorrelationID = corr
	return env
}

func publish(t *testing.T, q store.Queue, envs ...transport.Envelope) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), promptWait)
	defer cancel()
	if err := q.Publish(ctx, envs); err != nil {
		t.Fatalf("publish %d messages: got error %v, want nil", len(envs), err)
	}
}

// receive calls Receive until it has n deliveries, waiting at most wait.
func receive(t *testing.T, q store.Queue, n int, wait time.Duration) []transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	var got []transport.Delivery
	for len(got) < n {
		ds, err := q.Receive(ctx, n-len(got))
		if err != nil {
			t.Fatalf("receive: got %d of %d deliveries within %v, then error %v", len(got), n, wait, err)
		}
		if len(ds) > n-len(got) {
			t.Fatalf("receive(max=%d): got %d deliveries", n-len(got), len(ds))
		}
		got = append(got, ds...)
	}
	return got
}

// expectNothing fails the test if a delivery arrives within wait.
func expectNothing(t *testing.T, q store.Queue, what string, wait time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	ds, err := q.Receive(ctx, 10)
	switch {
	case err == nil:
		t.Fatalf("%s: got %s, want no delivery within %v", what, describe(ds), wait)
	case !errors.Is(err, context.DeadlineExceeded):
		t.Fatalf("%s: receive: got error %v, want context.DeadlineExceeded after %v", what, err, wait)
	}
}

func ackAll(t *testing.T, q store.Queue, ds []transport.Delivery) {
	t.Helper()
	if err := q.Ack(t.Context(), ds); err != nil {
		t.Fatalf("ack %s: got error %v, want nil", describe(ds), err)
	}
}

// describe formats deliveries for failure messages.
func describe(ds []transport.Delivery) string {
	if len(ds) == 0 {
		return "no deliveries"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%s (attempt %d)", d.Envelope.ID, d.Attempt)
	}
	return strings.Join(parts, ", ")
}

func testQueueConsumeAndEnqueueCommitTogether(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	ctx := t.Context()
	base := now()
	publish(t, q, message("m-1", "k-1"))
	d := receive(t, q, 1, promptWait)[0]
	emitted := message("e-1", "k-2")

	uow := queueUnit(t, s)
	ik := store.InboxKey{SagaType: "order", Key: "k-1", MessageID: "m-1"}
	loadIn(t, uow, &store.LoadParams{Keys: []store.Key{key("order", "k-1")}, Inbox: []store.InboxKey{ik}})
	if err := uow.Consume(ctx, []transport.Delivery{d}); err != nil {
		t.Fatalf("consume: got error %v, want nil", err)
	}
	if err := uow.Enqueue(ctx, []transport.Envelope{emitted.Clone()}); err != nil {
		t.Fatalf("enqueue: got error %v, want nil", err)
	}
	err := uow.Commit(ctx, &store.Changes{
		Inserts: []*store.Instance{newInstance("order", "k-1", base)},
		Inbox:   []store.InboxEntry{{InboxKey: ik, ProcessedAt: base}},
	})
	if rerr := uow.Rollback(ctx); rerr != nil {
		t.Errorf("rollback after commit: got error %v, want nil", rerr)
	}
	if err != nil {
		t.Fatalf("commit: got error %v, want nil", err)
	}

	// The emitted message is handed out; the consumed one never again, not
	// even after its lease ended.
	ds := receive(t, q, 1, promptWait)
	if ds[0].Envelope.ID != "e-1" {
		t.Fatalf("after the commit: got %s, want e-1 (the enqueued message)", describe(ds))
	}
	checkEnvelope(t, "enqueued e-1", ds[0].Envelope, emitted)
	ackAll(t, q, ds)
	expectNothing(t, q, "after the commit consumed m-1 and e-1 was acked", f.quietWait())
	if loadOne(t, s, key("order", "k-1")) == nil || !seen(t, s, ik) {
		t.Error("instance and inbox record committed with the consumption: got absent, want present")
	}
}

func testQueueFailedCommitKeepsDelivery(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	ctx := t.Context()
	base := now()
	commit(t, s, &store.Changes{Inserts: []*store.Instance{newInstance("order", "taken", base)}})
	publish(t, q, message("m-1", "taken"))
	d := receive(t, q, 1, promptWait)[0]

	// A commit that conflicts neither consumes nor enqueues.
	uow := queueUnit(t, s)
	if err := uow.Consume(ctx, []transport.Delivery{d}); err != nil {
		t.Fatalf("consume: got error %v, want nil", err)
	}
	if err := uow.Enqueue(ctx, []transport.Envelope{message("e-1", "k-2")}); err != nil {
		t.Fatalf("enqueue: got error %v, want nil", err)
	}
	err := uow.Commit(ctx, &store.Changes{Inserts: []*store.Instance{newInstance("order", "taken", base)}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("commit inserting an existing instance: got error %v, want one wrapping store.ErrConflict", err)
	}
	if err := uow.Rollback(ctx); err != nil {
		t.Errorf("rollback after a failed commit: got error %v, want nil", err)
	}
	ds := receive(t, q, 1, f.redeliveryWait())
	if ds[0].Envelope.ID != "m-1" || ds[0].Attempt != 2 {
		t.Fatalf("after a conflicting commit: got %s, want m-1 again after its lease, attempt 2 (and never e-1)", describe(ds))
	}

	// Neither does a unit of work rolled back without a commit.
	uow = queueUnit(t, s)
	if err := uow.Consume(ctx, ds); err != nil {
		t.Fatalf("consume: got error %v, want nil", err)
	}
	if err := uow.Enqueue(ctx, []transport.Envelope{message("e-2", "k-2")}); err != nil {
		t.Fatalf("enqueue: got error %v, want nil", err)
	}
	if err := uow.Rollback(ctx); err != nil {
		t.Fatalf("rollback: got error %v, want nil", err)
	}
	ds = receive(t, q, 1, f.redeliveryWait())
	if ds[0].Envelope.ID != "m-1" || ds[0].Attempt != 3 {
		t.Fatalf("after a rollback: got %s, want m-1 again after its lease, attempt 3 (and never e-2)", describe(ds))
	}
	ackAll(t, q, ds)
	expectNothing(t, q, "after acking m-1 (e-1 and e-2 were never committed)", f.quietWait())
}

func testQueueConsumeOfLostLeaseFails(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	ctx := t.Context()
	base := now()
	publish(t, q, message("m-1", "k-1"))
	stale := receive(t, q, 1, promptWait)[0]
	fresh := receive(t, q, 1, f.redeliveryWait())[0]
	if fresh.Envelope.ID != "m-1" || fresh.Attempt != 2 {
		t.Fatalf("after the lease ended: got %s, want m-1 at attempt 2", describe([]transport.Delivery{fresh}))
	}

	uow := queueUnit(t, s)
	if err := uow.Consume(ctx, []transport.Delivery{stale}); err != nil {
		t.Fatalf("consume: got error %v, want nil (the lease is checked at commit)", err)
	}
	ik := store.InboxKey{SagaType: "order", Key: "k-1", MessageID: "m-1"}
	err := uow.Commit(ctx, &store.Changes{
		Inserts: []*store.Instance{newInstance("order", "k-1", base)},
		Inbox:   []store.InboxEntry{{InboxKey: ik, ProcessedAt: base}},
	})
	if !errors.Is(err, transport.ErrLeaseLost) {
		t.Fatalf("commit consuming a delivery whose lease was lost: got error %v, want one wrapping transport.ErrLeaseLost", err)
	}
	if err := uow.Rollback(ctx); err != nil {
		t.Errorf("rollback after a failed commit: got error %v, want nil", err)
	}
	if in := loadOne(t, s, key("order", "k-1")); in != nil || seen(t, s, ik) {
		t.Errorf("after a commit that lost its lease: instance %+v, inbox seen %v; want neither", in, seen(t, s, ik))
	}
	// The newer delivery is untouched: it settles normally.
	ackAll(t, q, []transport.Delivery{fresh})
	expectNothing(t, q, "after acking the newer delivery", f.quietWait())
}

// twinKeys are saga keys in the forms a sender may spell them: NFC, NFD,
// and NFD with surrounding white space. The engine canonicalises all three
// to one key, so a partitioned queue must hand them to one partition.
var twinKeys = []func(i int) string{
	func(i int) string { return fmt.Sprintf("caf\u00e9-%d", i) },
	func(i int) string { return fmt.Sprintf("cafe\u0301-%d", i) },
	func(i int) string { return fmt.Sprintf(" cafe\u0301-%d\t", i) },
}

func testQueuePartitionsByCanonicalKey(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	pc, ok := s.(transport.PartitionedConsumer)
	if !ok {
		t.Fatalf("Features.Partitioned is true but %T is not a transport.PartitionedConsumer", s)
	}
	ctx := t.Context()
	const keys, parts = 12, 4
	group := map[string]int{} // message ID → index of its saga key, -1 without one
	sent := map[string]transport.Envelope{}
	var published []transport.Envelope
	var enqueued []transport.Envelope
	for i := range keys {
		for form, spell := range twinKeys {
			env := message(fmt.Sprintf("m-%d-%d", i, form), spell(i))
			group[env.ID], sent[env.ID] = i, env
			// Half through Publish, half through a unit of work: both ways
			// into the queue must agree.
			if (i+form)%2 == 0 {
				published = append(published, env)
			} else {
				enqueued = append(enqueued, env)
			}
		}
	}
	for i := range 4 {
		env := message(fmt.Sprintf("n-%d", i), "")
		group[env.ID], sent[env.ID] = -1, env
		published = append(published, env)
	}
	publish(t, q, published...)
	uow := queueUnit(t, s)
	if err := uow.Enqueue(ctx, enqueued); err != nil {
		t.Fatalf("enqueue: got error %v, want nil", err)
	}
	if err := uow.Commit(ctx, &store.Changes{}); err != nil {
		t.Fatalf("commit of the enqueued messages: got error %v, want nil", err)
	}

	// Drain each partition in turn, acking as it goes.
	partOf := map[string]int{} // message ID → partition
	for part := range parts {
		for {
			// Every message is visible already: a partition that hands out
			// nothing for a second has no more.
			rctx, cancel := context.WithTimeout(ctx, time.Second)
			ds, err := pc.ReceivePartition(rctx, 100, part, parts)
			cancel()
			if errors.Is(err, context.DeadlineExceeded) {
				break
			}
			if err != nil {
				t.Fatalf("receive partition %d of %d: got error %v, want deliveries or context.DeadlineExceeded", part, parts, err)
			}
			for _, d := range ds {
				id := d.Envelope.ID
				if p, ok := partOf[id]; ok && p != part {
					t.Errorf("message %s handed out by partitions %d and %d", id, p, part)
				}
				partOf[id] = part
				if want, ok := sent[id]; !ok {
					t.Errorf("partition %d handed out %s, which was never sent", part, id)
				} else {
					checkEnvelope(t, "message "+id, d.Envelope, want)
				}
			}
			ackAll(t, q, ds)
		}
	}
	if len(partOf) != len(sent) {
		var missing []string
		for id := range sent {
			if _, ok := partOf[id]; !ok {
				missing = append(missing, id)
			}
		}
		slices.Sort(missing)
		t.Fatalf("the partitions handed out %d of %d messages; missing %q", len(partOf), len(sent), missing)
	}
	keyParts := make([]map[int]bool, keys) // saga key → its partitions
	spread := map[int]bool{}
	for id, part := range partOf {
		if i := group[id]; i >= 0 {
			if keyParts[i] == nil {
				keyParts[i] = map[int]bool{}
			}
			keyParts[i][part] = true
			spread[part] = true
		}
	}
	for i, ps := range keyParts {
		if len(ps) > 1 {
			var forms []string
			for _, spell := range twinKeys {
				forms = append(forms, fmt.Sprintf("%+q", spell(i)))
			}
			t.Errorf("the forms %s of one saga key went to %d partitions, want one: partitions must hash the canonical key", strings.Join(forms, ", "), len(ps))
		}
	}
	if len(spread) < 2 {
		t.Errorf("%d saga keys all went to one partition of %d, want them spread", keys, parts)
	}
}

func testQueuePending(t *testing.T, s store.Store, f Features) {
	q := queueOf(t, s)
	pc, ok := s.(transport.PendingCounter)
	if !ok {
		t.Fatalf("Features.Pending is true but %T is not a transport.PendingCounter", s)
	}
	ctx := t.Context()
	check := func(what string, ready, unacked int) {
		t.Helper()
		r, u, err := pc.Pending(ctx)
		if err != nil {
			t.Fatalf("%s: pending: got error %v, want nil", what, err)
		}
		if r != ready || u != unacked {
			t.Errorf("%s: pending: got %d ready, %d unacked; want %d, %d", what, r, u, ready, unacked)
		}
	}
	check("empty queue", 0, 0)
	publish(t, q, message("m-1", "k-1"), message("m-2", "k-2"), message("m-3", "k-3"))
	check("after publishing 3", 3, 0)

	// A rolled-back enqueue adds nothing; a committed one adds its messages.
	uow := queueUnit(t, s)
	if err := uow.Enqueue(ctx, []transport.Envelope{message("e-1", "k-4")}); err != nil {
		t.Fatalf("enqueue: got error %v, want nil", err)
	}
	if err := uow.Rollback(ctx); err != nil {
		t.Fatalf("rollback: got error %v, want nil", err)
	}
	check("after a rolled-back enqueue", 3, 0)
	uow = queueUnit(t, s)
	if err := uow.Enqueue(ctx, []transport.Envelope{message("e-2", "k-4")}); err != nil {
		t.Fatalf("enqueue: got error %v, want nil", err)
	}
	if err := uow.Commit(ctx, &store.Changes{}); err != nil {
		t.Fatalf("commit of an enqueue: got error %v, want nil", err)
	}
	check("after a committed enqueue", 4, 0)

	// While leases hold, received messages are unacked, not ready. The
	// checks are exact only when no lease can have ended in between.
	received := time.Now()
	ds := receive(t, q, 2, promptWait)
	leased := func(what string, ready, unacked int) {
		t.Helper()
		r, u, err := pc.Pending(ctx)
		if err != nil {
			t.Fatalf("%s: pending: got error %v, want nil", what, err)
		}
		if time.Since(received) >= f.Lease {
			t.Logf("%s: a lease may have ended (%v since the receive, Lease %v): not checking %d ready, %d unacked", what, time.Since(received), f.Lease, r, u)
			return
		}
		if r != ready || u != unacked {
			t.Errorf("%s: pending: got %d ready, %d unacked; want %d, %d", what, r, u, ready, unacked)
		}
	}
	leased("after receiving 2", 2, 2)
	ackAll(t, q, ds[:1])
	leased("after acking 1 of them", 2, 1)
	if err := q.Nack(ctx, ds[1], 0); err != nil {
		t.Fatalf("nack: got error %v, want nil", err)
	}
	check("after nacking the other at once", 3, 0)
	rest := receive(t, q, 3, promptWait)
	ackAll(t, q, rest)
	check("after acking all", 0, 0)
}

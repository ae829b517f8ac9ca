package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
)

// Features describes what the transport under test does, so that the suite
// checks what it claims and skips, with a reason, what it does not. The zero
// value is not valid: Lease is required.
type Features struct {
	// Lease is the visibility timeout the constructor configured: how long
	// an unsettled delivery stays invisible before it is handed out again.
	// The suite waits up to 20×Lease for a redelivery and 3×Lease to
	// conclude that nothing more arrives. Required, must be positive.
	Lease time.Duration

	// Fencing is true when Ack and Nack of a delivery whose lease expired
	// and whose message was handed out again return an error wrapping
	// transport.ErrLeaseLost, leaving the newer delivery unsettled.
	Fencing bool

	// NativeDelay is true when Nack honours its delay: the message is not
	// handed out again before the delay has passed.
	NativeDelay bool

	// Partitioned is true when the transport implements
	// transport.PartitionedConsumer: ReceivePartition(ctx, max, part,
	// parts) hands out only the messages whose partition key, the
	// canonical form of the CorrelationID (Unicode NFC, trimmed) or the ID
	// without one, hashes to part modulo parts with PostgreSQL's hashtext
	// (what pgstore and every Idem transport use), so that the NFC and NFD
	// forms of one saga key always share a partition.
	Partitioned bool

	// SizeLimit is true when the transport implements transport.SizeLimiter
	// with a positive MaxMessageBytes: Publish accepts a Body of exactly
	// that many bytes, and refuses one byte more, before delivering any of
	// it, with an error wrapping transport.ErrTooLarge. The suite publishes
	// a message of that size, so keep the limit in the megabytes.
	SizeLimit bool

	// PublishDedup is true when Publish drops an envelope whose
	// transport.PublishID it accepted before, within a window longer than
	// the suite takes (a broker-side deduplication window, such as
	// JetStream's Nats-Msg-Id): a plain envelope published again is
	// dropped, and so is a re-publish (transport.HeaderRepublish) whose
	// mark repeats, but a re-publish with a new mark is delivered.
	PublishDedup bool

	// Pending is true when the transport implements
	// transport.PendingCounter and, used alone, counts exactly: ready is
	// every message published and neither handed out nor acked, unacked
	// every delivery handed out and not settled while its lease lasts.
	// The suite polls the counts, for brokers whose counts trail their
	// confirms, and checks an unacked count only within a lease of the
	// Receive (retrying on a fresh transport when it ran out).
	Pending bool

	// Shared is true when the transport implements
	// transport.SharedConsumer: ReceiveShare hands out its share's range
	// of the saga keys (transport.ShareOf), another share's messages once
	// visible for StealAfter, the whole queue when Parts < 2, and follows
	// a change of the share while it waits.
	Shared bool
}

// promptWait bounds the wait for things that should happen at once
// (a delivery of a published message, a blocked call returning). It only
// matters when the transport is broken, so it is generous for slow CI.
const promptWait = 10 * time.Second

// redeliveryWait bounds the wait for a redelivery after a lease expiry.
func (f Features) redeliveryWait() time.Duration { return 20 * f.Lease }

// quietWait is how long nothing must arrive for the suite to conclude that
// nothing will.
func (f Features) quietWait() time.Duration { return 3 * f.Lease }

// Run runs the conformance suite against the transports that newTransport
// returns, one fresh, isolated transport per subtest. Subtests call
// t.Parallel and close their transport when they end; newTransport is called
// from the subtest's goroutine and may call t.Fatal or t.Skip.
//
// The subtests are:
//
//   - PublishThenReceive: an envelope comes back field by field.
//   - ReceiveBatchRespectsMax: Receive never returns more than max (max < 1
//     means 1).
//   - ReceiveBlocksUntilPublish: a blocked Receive returns once a message is
//     published.
//   - ReceiveHonoursContext: Receive returns the context's error promptly and
//     loses no message when it gives up.
//   - AckedNotRedelivered: an acked message does not come back.
//   - UnackedRedeliveredAfterLease: an unsettled delivery comes back after
//     the lease, not before, with Attempt 2 and a new Token.
//   - NackRedelivers: Nack with no delay hands the message out again with
//     Attempt 2; with NativeDelay, not before the delay.
//   - LateAckAfterLeaseLostIsFenced (Fencing): settling a delivery whose
//     message was handed out again fails with transport.ErrLeaseLost and
//     leaves the newer delivery unsettled.
//   - AckTwiceIsNoError: settling a settled delivery again is not an error and
//     changes nothing.
//   - ConcurrentConsumersAtLeastOnce: 4 consumers see every one of 500
//     published messages at least once, and nothing that was not published.
//   - PublishSameIDTwice: a message published twice with one ID is delivered
//     at least once and at most twice (exactly once with PublishDedup).
//   - RepublishAfterAck: a deliberate re-publish (transport.HeaderRepublish)
//     of a message handed out and acked, as a dead letter's replay sends
//     it, is delivered intact, and so is a second one with another mark.
//   - RepublishWhileDelayed: a deliberate re-publish of a message waiting
//     out a Nack delay, as "retry now" sends it, is delivered at once.
//   - RepublishDedup (PublishDedup): publishes are deduplicated by
//     transport.PublishID: a repeated mark or plain envelope is dropped,
//     a new mark is delivered.
//   - CloseReturnsErrClosed: after Close, every method returns
//     transport.ErrClosed.
//   - CloseUnblocksReceive: Close makes a blocked Receive return
//     transport.ErrClosed.
//   - PartitionedReceive (Partitioned): ReceivePartition hands out, from
//     each of 3 partitions, exactly the messages whose partition key hashes
//     to it, with and without a CorrelationID.
//   - PartitionedKeyForms (Partitioned): messages whose CorrelationIDs are
//     the NFC, NFD and space-padded forms of one key come out of one
//     partition, the canonical key's, for a partition count under which
//     the raw forms hash apart.
//   - SharedReceive (Shared): ReceiveShare hands out exactly its share's
//     messages, for each of 3 shares, while StealAfter never passes.
//   - SharedSteal (Shared): a share with nothing of its own takes another
//     share's message visible for StealAfter; Parts 1 is the whole queue;
//     a Part out of range is refused.
//   - SharedFollowsChange (Shared): a waiting ReceiveShare moved to
//     another share hands out that share's message published meanwhile.
//   - SizeLimit (SizeLimit): a Body of MaxMessageBytes is delivered
//     intact; one byte more is refused with transport.ErrTooLarge and
//     never delivered.
//   - PendingCounts (Pending): Pending counts ready and unacked messages
//     through publishing, receiving and acking, and returns
//     transport.ErrClosed after Close.
//   - ExtendLease (transport.LeaseExtender): extending a lease every third
//     of LeaseDuration keeps the delivery from being handed out again;
//     with Fencing, an extension of a delivery handed out again since
//     fails with transport.ErrLeaseLost.
//   - ExtendAfterNackKeepsDelay (transport.LeaseExtender, NativeDelay): an
//     extension of a nacked delivery is ignored and keeps the Nack's
//     delay.
//
// A capability case is skipped, with a reason, when its Features field is
// false, and fails when the field is true but the transport does not
// implement the interface.
func Run(t *testing.T, f Features, newTransport func(t *testing.T) transport.Transport) {
	t.Helper()
	if f.Lease <= 0 {
		t.Fatalf("transporttest: Features.Lease is %v, want a positive visibility timeout", f.Lease)
	}
	s := &suite{f: f, newTransport: newTransport}
	tests := []struct {
		name string
		fn   func(t *testing.T)
	}{
		{"PublishThenReceive", s.publishThenReceive},
		{"ReceiveBatchRespectsMax", s.receiveBatchRespectsMax},
		{"ReceiveBlocksUntilPublish", s.receiveBlocksUntilPublish},
		{"ReceiveHonoursContext", s.receiveHonoursContext},
		{"AckedNotRedelivered", s.ackedNotRedelivered},
		{"UnackedRedeliveredAfterLease", s.unackedRedeliveredAfterLease},
		{"NackRedelivers", s.nackRedelivers},
		{"LateAckAfterLeaseLostIsFenced", s.lateAckAfterLeaseLostIsFenced},
		{"AckTwiceIsNoError", s.ackTwiceIsNoError},
		{"ConcurrentConsumersAtLeastOnce", s.concurrentConsumersAtLeastOnce},
		{"PublishSameIDTwice", s.publishSameIDTwice},
		{"RepublishAfterAck", s.republishAfterAck},
		{"RepublishWhileDelayed", s.republishWhileDelayed},
		{"RepublishDedup", s.republishDedup},
		{"CloseReturnsErrClosed", s.closeReturnsErrClosed},
		{"CloseUnblocksReceive", s.closeUnblocksReceive},
		{"PartitionedReceive", s.partitionedReceive},
		{"PartitionedKeyForms", s.partitionedKeyForms},
		{"SharedReceive", s.sharedReceive},
		{"SharedSteal", s.sharedSteal},
		{"SharedFollowsChange", s.sharedFollowsChange},
		{"SizeLimit", s.sizeLimit},
		{"PendingCounts", s.pendingCounts},
		{"ExtendLease", s.extendLease},
		{"ExtendAfterNackKeepsDelay", s.extendAfterNack},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

type suite struct {
	f            Features
	newTransport func(t *testing.T) transport.Transport
}

// setup returns a fresh transport that is closed when the test ends.
func (s *suite) setup(t *testing.T) transport.Transport {
	t.Helper()
	tr := s.newTransport(t)
	if tr == nil {
		t.Fatal("newTransport returned a nil transport")
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func (s *suite) publishThenReceive(t *testing.T) {
	tr := s.setup(t)
	sentAt := time.Date(2024, 2, 29, 23, 59, 58, 123456789, time.FixedZone("UTC+5:30", 5*3600+1800))
	full := transport.Envelope{
		ID:             "msg-full-1",
		Type:           "transporttest.FileUploaded",
		CorrelationID:  "upload/Grüße-42",
		CausationID:    "msg-cause-0",
		IdempotencyKey: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
		Headers: map[string]string{
			transport.HeaderTraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
			transport.HeaderIntent:      "publish",
			transport.HeaderSagaType:    "upload",
			transport.HeaderSagaKey:     "upload/Grüße-42",
			"x-empty":                   "",
		},
		SentAt: sentAt,
		Body:   []byte(`{"file":"Grüße.csv","lines":[1,2,3],"note":"tab\there"}`),
	}
	minimal := transport.Envelope{
		ID:     "msg-minimal-1",
		Type:   "transporttest.Ping",
		SentAt: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
	}
	want := map[string]transport.Envelope{full.ID: full.Clone(), minimal.ID: minimal.Clone()}

	published := []transport.Envelope{full.Clone(), minimal.Clone()}
	publish(t, tr, published...)
	// What was published belongs to the transport now: changing the
	// caller's copy must not change what is delivered.
	published[0].Headers["x-mutated"] = "after publish"
	published[0].Body[0] = 'X'

	ds := receive(t, tr, 2, promptWait)
	for _, d := range ds {
		w, ok := want[d.Envelope.ID]
		if !ok {
			t.Fatalf("delivered unknown or repeated message %s", describe(d))
		}
		delete(want, d.Envelope.ID)
		for _, diff := range diffEnvelope(d.Envelope, w) {
			t.Errorf("message %s: %s", w.ID, diff)
		}
		if d.Attempt != 1 {
			t.Errorf("message %s: got Attempt %d, want 1", w.ID, d.Attempt)
		}
		if d.Token == "" {
			t.Errorf("message %s: got an empty Token", w.ID)
		}
	}
	if ds[0].Token == ds[1].Token {
		t.Errorf("two deliveries share Token %q", ds[0].Token)
	}
	ack(t, tr, ds...)
}

func (s *suite) receiveBatchRespectsMax(t *testing.T) {
	tr := s.setup(t)
	const n = 10
	publish(t, tr, envelopes("batch", n)...)

	ctx, cancel := context.WithTimeout(t.Context(), promptWait)
	defer cancel()
	seen := map[string]bool{}
	var all []transport.Delivery
	for len(seen) < n {
		ds, err := tr.Receive(ctx, 3)
		if err != nil {
			t.Fatalf("Receive(max=3) after %d of %d messages: %v", len(seen), n, err)
		}
		if len(ds) == 0 || len(ds) > 3 {
			t.Fatalf("Receive(max=3) returned %d deliveries, want 1 to 3", len(ds))
		}
		for _, d := range ds {
			seen[d.Envelope.ID] = true
		}
		all = append(all, ds...)
	}
	ack(t, tr, all...)

	publish(t, tr, envelopes("batch-small", 4)...)
	for _, max := range []int{0, -1} {
		ds, err := tr.Receive(ctx, max)
		if err != nil {
			t.Fatalf("Receive(max=%d): %v", max, err)
		}
		if len(ds) != 1 {
			t.Fatalf("Receive(max=%d) returned %d deliveries, want 1 (max < 1 means 1)", max, len(ds))
		}
		ack(t, tr, ds...)
	}
	ack(t, tr, receive(t, tr, 2, promptWait)...)
}

func (s *suite) receiveBlocksUntilPublish(t *testing.T) {
	tr := s.setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), promptWait)
	defer cancel()

	type result struct {
		ds  []transport.Delivery
		err error
	}
	started := make(chan struct{})
	done := make(chan result, 1)
	go func() {
		close(started)
		ds, err := tr.Receive(ctx, 1)
		done <- result{ds, err}
	}()
	<-started
	select {
	case r := <-done:
		t.Fatalf("Receive returned before anything was published: %s, %v", describe(r.ds...), r.err)
	default:
	}

	publish(t, tr, envelopes("blocked", 1)...)
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Receive: %v", r.err)
		}
		if len(r.ds) != 1 || r.ds[0].Envelope.ID != "blocked-0" {
			t.Fatalf("Receive returned %s, want blocked-0", describe(r.ds...))
		}
		ack(t, tr, r.ds...)
	case <-time.After(promptWait):
		t.Fatalf("Receive still blocked %v after Publish", promptWait)
	}
}

func (s *suite) receiveHonoursContext(t *testing.T) {
	tr := s.setup(t)

	// A context that is already done.
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if ds, err := tr.Receive(ctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("Receive with a cancelled context: got %s, %v; want context.Canceled", describe(ds...), err)
	}

	// Cancelled while blocked.
	ctx, cancel = context.WithCancel(t.Context())
	defer cancel()
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		close(started)
		ds, err := tr.Receive(ctx, 1)
		if err == nil {
			err = fmt.Errorf("unexpected deliveries %s", describe(ds...))
		}
		done <- err
	}()
	<-started
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("blocked Receive after cancel: got %v, want context.Canceled", err)
		}
	case <-time.After(promptWait):
		t.Fatalf("Receive still blocked %v after its context was cancelled", promptWait)
	}

	// A deadline.
	ctx, cancel = context.WithTimeout(t.Context(), s.f.Lease)
	defer cancel()
	if ds, err := tr.Receive(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive past its deadline: got %s, %v; want context.DeadlineExceeded", describe(ds...), err)
	}

	// Giving up must not swallow a message: one published now comes out at
	// once, on its first attempt rather than after a lease.
	publish(t, tr, envelopes("after-cancel", 1)...)
	d := receiveOne(t, tr, promptWait)
	if d.Envelope.ID != "after-cancel-0" || d.Attempt != 1 {
		t.Fatalf("after cancelled Receives: got %s, want after-cancel-0 attempt 1", describe(d))
	}
	ack(t, tr, d)
}

func (s *suite) ackedNotRedelivered(t *testing.T) {
	tr := s.setup(t)
	publish(t, tr, envelopes("acked", 3)...)
	ack(t, tr, receive(t, tr, 3, promptWait)...)
	expectNothing(t, tr, s.f.quietWait())
}

func (s *suite) unackedRedeliveredAfterLease(t *testing.T) {
	tr := s.setup(t)
	publish(t, tr, envelopes("unacked", 1)...)
	start := time.Now() // the lease starts no earlier than this
	d1 := receiveOne(t, tr, promptWait)
	d2 := receiveOne(t, tr, promptWait+s.f.redeliveryWait())
	elapsed := time.Since(start)

	if d2.Envelope.ID != d1.Envelope.ID {
		t.Fatalf("got %s, want a redelivery of %s", describe(d2), describe(d1))
	}
	if elapsed < s.f.Lease {
		t.Errorf("redelivered after %v, before the %v lease expired", elapsed, s.f.Lease)
	}
	if d1.Attempt != 1 || d2.Attempt != 2 {
		t.Errorf("got Attempts %d then %d, want 1 then 2", d1.Attempt, d2.Attempt)
	}
	if d2.Token == d1.Token {
		t.Errorf("redelivery reuses Token %q", d1.Token)
	}
	for _, diff := range diffEnvelope(d2.Envelope, d1.Envelope) {
		t.Errorf("redelivered envelope differs: %s", diff)
	}
	ack(t, tr, d2)
}

func (s *suite) nackRedelivers(t *testing.T) {
	t.Run("Immediate", func(t *testing.T) {
		t.Parallel()
		tr := s.setup(t)
		publish(t, tr, envelopes("nack", 1)...)
		d1 := receiveOne(t, tr, promptWait)
		if err := tr.Nack(t.Context(), d1, 0); err != nil {
			t.Fatalf("Nack(%s, 0): %v", describe(d1), err)
		}
		d2 := receiveOne(t, tr, promptWait+s.f.redeliveryWait())
		if d2.Envelope.ID != d1.Envelope.ID || d2.Attempt != 2 {
			t.Fatalf("after Nack of %s: got %s, want attempt 2 of the same message", describe(d1), describe(d2))
		}
		if d2.Token == d1.Token {
			t.Errorf("redelivery reuses Token %q", d1.Token)
		}
		ack(t, tr, d2)
	})
	t.Run("Delay", func(t *testing.T) {
		t.Parallel()
		if !s.f.NativeDelay {
			t.Skip("transport does not honour Nack delays: Features.NativeDelay is false")
		}
		nackWithDelay(t, s.setup(t), "nack-delay", 2*s.f.Lease, s.f.redeliveryWait(), "", nil)
	})
}

// nackWithDelay publishes a message, receives it, nacks it with delay,
// calls then (when not nil) with the nacked delivery, and checks that the
// message comes back as attempt 2 no sooner than delay after the Nack
// (within delay+promptWait+wait), and acks it; after names what then
// did, for the error.
func nackWithDelay(t *testing.T, tr transport.Transport, prefix string, delay, wait time.Duration, after string, then func(transport.Delivery)) {
	t.Helper()
	publish(t, tr, envelopes(prefix, 1)...)
	d1 := receiveOne(t, tr, promptWait)
	start := time.Now() // the delay starts no earlier than this
	if err := tr.Nack(t.Context(), d1, delay); err != nil {
		t.Fatalf("Nack(%s, %v): %v", describe(d1), delay, err)
	}
	if then != nil {
		then(d1)
	}
	d2 := receiveOne(t, tr, delay+promptWait+wait)
	if elapsed := time.Since(start); elapsed < delay {
		t.Errorf("redelivered %v after a Nack with delay %v%s", elapsed, delay, after)
	}
	if d2.Envelope.ID != d1.Envelope.ID || d2.Attempt != 2 {
		t.Fatalf("after Nack of %s: got %s, want attempt 2 of the same message", describe(d1), describe(d2))
	}
	ack(t, tr, d2)
}

func (s *suite) lateAckAfterLeaseLostIsFenced(t *testing.T) {
	if !s.f.Fencing {
		t.Skip("transport does not fence: Features.Fencing is false, so a late Ack may settle a newer delivery")
	}
	tr := s.setup(t)
	publish(t, tr, envelopes("fenced", 1)...)
	d1 := receiveOne(t, tr, promptWait)
	d2 := receiveOne(t, tr, promptWait+s.f.redeliveryWait()) // d1's lease expired
	if d2.Envelope.ID != d1.Envelope.ID || d2.Attempt != 2 {
		t.Fatalf("got %s, want attempt 2 of %s", describe(d2), describe(d1))
	}

	if err := tr.Ack(t.Context(), []transport.Delivery{d1}); !errors.Is(err, transport.ErrLeaseLost) {
		t.Errorf("late Ack of %s after redelivery: got %v, want ErrLeaseLost", describe(d1), err)
	}
	if err := tr.Nack(t.Context(), d1, 0); !errors.Is(err, transport.ErrLeaseLost) {
		t.Errorf("late Nack of %s after redelivery: got %v, want ErrLeaseLost", describe(d1), err)
	}
	// The newer delivery is still unsettled: acking it works and settles
	// the message.
	ack(t, tr, d2)
	expectNothing(t, tr, s.f.quietWait())
}

func (s *suite) ackTwiceIsNoError(t *testing.T) {
	tr := s.setup(t)
	ctx := t.Context()
	if err := tr.Ack(ctx, nil); err != nil {
		t.Fatalf("Ack of no deliveries: %v", err)
	}

	publish(t, tr, envelopes("twice", 2)...)
	ds := receive(t, tr, 2, promptWait)
	acked, nacked := ds[0], ds[1]

	// Ack, then settle again in every way: no error, no redelivery.
	ack(t, tr, acked)
	if err := tr.Ack(ctx, []transport.Delivery{acked}); err != nil {
		t.Errorf("second Ack of %s: %v", describe(acked), err)
	}
	if err := tr.Ack(ctx, []transport.Delivery{acked, acked}); err != nil {
		t.Errorf("Ack of %s twice in one call: %v", describe(acked), err)
	}
	if err := tr.Nack(ctx, acked, 0); err != nil {
		t.Errorf("Nack of acked %s: %v", describe(acked), err)
	}

	// Nack twice: the message comes back once.
	if err := tr.Nack(ctx, nacked, 0); err != nil {
		t.Fatalf("Nack of %s: %v", describe(nacked), err)
	}
	if err := tr.Nack(ctx, nacked, 0); err != nil {
		t.Errorf("second Nack of %s: %v", describe(nacked), err)
	}
	again := receiveOne(t, tr, promptWait+s.f.redeliveryWait())
	if again.Envelope.ID != nacked.Envelope.ID || again.Attempt != 2 {
		t.Fatalf("after Nack of %s: got %s, want attempt 2 of the same message", describe(nacked), describe(again))
	}
	ack(t, tr, again)
	expectNothing(t, tr, s.f.quietWait())
}

func (s *suite) concurrentConsumersAtLeastOnce(t *testing.T) {
	tr := s.setup(t)
	const n, consumers = 500, 4
	envs := envelopes("conc", n)
	published := make(map[string]transport.Envelope, n)
	for i := range envs {
		envs[i].CorrelationID = fmt.Sprintf("key-%d", i%37)
		published[envs[i].ID] = envs[i]
	}
	for i := 0; i < n; i += 100 {
		publish(t, tr, envs[i:i+100]...)
	}

	ctx, cancel := context.WithTimeout(t.Context(), promptWait+s.f.redeliveryWait())
	defer cancel()
	var (
		mu        sync.Mutex
		seen      = make(map[string]int, n)
		invented  []string
		leaseLost int
		allSeen   bool
	)
	var wg sync.WaitGroup
	for range consumers {
		wg.Go(func() {
			for {
				ds, err := tr.Receive(ctx, 16)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("Receive: %v", err)
					}
					return
				}
				mu.Lock()
				for _, d := range ds {
					want, ok := published[d.Envelope.ID]
					if !ok || !bytes.Equal(d.Envelope.Body, want.Body) {
						invented = append(invented, describe(d))
						continue
					}
					seen[d.Envelope.ID]++
				}
				if len(seen) == n && !allSeen {
					allSeen = true
					cancel()
				}
				mu.Unlock()
				// A lease may expire under load; that is at-least-once, not
				// a failure. The context outlives cancel.
				err = tr.Ack(context.WithoutCancel(ctx), ds)
				if errors.Is(err, transport.ErrLeaseLost) {
					mu.Lock()
					leaseLost++
					mu.Unlock()
				} else if err != nil {
					t.Errorf("Ack: %v", err)
				}
			}
		})
	}
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(invented) > 0 {
		t.Errorf("%d deliveries of messages never published, first: %s", len(invented), invented[0])
	}
	if !allSeen {
		var missing []string
		for id := range published {
			if seen[id] == 0 {
				missing = append(missing, id)
			}
		}
		t.Fatalf("%d of %d messages never delivered to %d consumers, for example %s", len(missing), n, consumers, strings.Join(missing[:min(5, len(missing))], ", "))
	}
	extra := 0
	for _, c := range seen {
		extra += c - 1
	}
	t.Logf("%d messages, %d extra deliveries (%d acks fenced)", n, extra, leaseLost)
}

func (s *suite) publishSameIDTwice(t *testing.T) {
	tr := s.setup(t)
	// Transports may drop the second publish (a broker-side dedup window
	// keyed by the envelope ID) or deliver both. Deduplication is the
	// engine's job, in its inbox; the transport must only not lose it.
	env := envelopes("same", 1)[0]
	publish(t, tr, env)
	publish(t, tr, env)

	got := []transport.Delivery{receiveOne(t, tr, promptWait)}
	ack(t, tr, got[0])
	ctx, cancel := context.WithTimeout(t.Context(), s.f.quietWait())
	defer cancel()
	for {
		ds, err := tr.Receive(ctx, 2)
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Receive: %v", err)
			}
			break
		}
		ack(t, tr, ds...)
		got = append(got, ds...)
	}
	for _, d := range got {
		if d.Envelope.ID != env.ID || d.Attempt != 1 {
			t.Errorf("got %s, want attempt 1 of %s", describe(d), env.ID)
		}
	}
	if len(got) > 2 {
		t.Errorf("message published twice was delivered %d times: %s", len(got), describe(got...))
	}
	if s.f.PublishDedup && len(got) != 1 {
		t.Errorf("message published twice was delivered %d times by a transport that claims Features.PublishDedup: %s", len(got), describe(got...))
	}
	t.Logf("message published twice was delivered %d time(s); the engine's inbox deduplicates", len(got))
}

func (s *suite) closeReturnsErrClosed(t *testing.T) {
	tr := s.setup(t)
	ctx := t.Context()
	publish(t, tr, envelopes("closed", 2)...)
	ds := receive(t, tr, 2, promptWait)

	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := tr.Publish(ctx, envelopes("after-close", 1)); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Publish after Close: got %v, want ErrClosed", err)
	}
	if got, err := tr.Receive(ctx, 1); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Receive after Close: got %s, %v; want ErrClosed", describe(got...), err)
	}
	if err := tr.Ack(ctx, ds[:1]); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Ack after Close: got %v, want ErrClosed", err)
	}
	if err := tr.Nack(ctx, ds[1], 0); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Nack after Close: got %v, want ErrClosed", err)
	}
	if err := tr.Close(); err != nil && !errors.Is(err, transport.ErrClosed) {
		t.Errorf("second Close: got %v, want nil or ErrClosed", err)
	}
}

func (s *suite) closeUnblocksReceive(t *testing.T) {
	tr := s.setup(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*promptWait)
	defer cancel()
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		close(started)
		ds, err := tr.Receive(ctx, 1)
		if err == nil {
			err = fmt.Errorf("unexpected deliveries %s", describe(ds...))
		}
		done <- err
	}()
	<-started
	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, transport.ErrClosed) {
			t.Fatalf("Receive blocked during Close: got %v, want ErrClosed", err)
		}
	case <-time.After(promptWait):
		t.Fatalf("Receive still blocked %v after Close", promptWait)
	}
}

// envelopes returns n distinct envelopes with IDs prefix-0, prefix-1, ….
func envelopes(prefix string, n int) []transport.Envelope {
	now := time.Now()
	envs := make([]transport.Envelope, n)
	for i := range envs {
		id := fmt.Sprintf("%s-%d", prefix, i)
		envs[i] = transport.Envelope{
			ID:            id,
			Type:          "transporttest.Ping",
			CorrelationID: "key-" + id,
			SentAt:        now,
			Body:          []byte(`{"id":"` + id + `"}`),
		}
	}
	return envs
}

func publish(t *testing.T, tr transport.Transport, envs ...transport.Envelope) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), promptWait)
	defer cancel()
	if err := tr.Publish(ctx, envs); err != nil {
		t.Fatalf("Publish of %d envelopes: %v", len(envs), err)
	}
}

// receive calls Receive until it has n deliveries, waiting at most wait.
func receive(t *testing.T, tr transport.Transport, n int, wait time.Duration) []transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	var got []transport.Delivery
	for len(got) < n {
		max := n - len(got)
		ds, err := tr.Receive(ctx, max)
		if err != nil {
			t.Fatalf("Receive: got %d of %d deliveries within %v: %v", len(got), n, wait, err)
		}
		if len(ds) == 0 {
			t.Fatal("Receive returned no deliveries and a nil error")
		}
		if len(ds) > max {
			t.Fatalf("Receive(max=%d) returned %d deliveries", max, len(ds))
		}
		got = append(got, ds...)
	}
	return got
}

func receiveOne(t *testing.T, tr transport.Transport, wait time.Duration) transport.Delivery {
	t.Helper()
	return receive(t, tr, 1, wait)[0]
}

func ack(t *testing.T, tr transport.Transport, ds ...transport.Delivery) {
	t.Helper()
	if err := tr.Ack(t.Context(), ds); err != nil {
		t.Fatalf("Ack of %s: %v", describe(ds...), err)
	}
}

// expectNothing fails the test if a delivery arrives within wait.
func expectNothing(t *testing.T, tr transport.Transport, wait time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	ds, err := tr.Receive(ctx, 10)
	switch {
	case err == nil:
		t.Fatalf("got %s, want no delivery within %v", describe(ds...), wait)
	case !errors.Is(err, context.DeadlineExceeded):
		t.Fatalf("Receive: got %v, want context.DeadlineExceeded after %v", err, wait)
	}
}

// describe formats deliveries for failure messages.
func describe(ds ...transport.Delivery) string {
	if len(ds) == 0 {
		return "no deliveries"
	}
	parts := make([]string, len(ds))
	for i, d := range ds {
		parts[i] = fmt.Sprintf("%s (attempt %d, token %q)", d.Envelope.ID, d.Attempt, d.Token)
	}
	return strings.Join(parts, ", ")
}

// diffEnvelope lists the fields in which got differs from want. Times are
// compared as instants at microsecond precision, the finest that every
// supported store and broker keeps; nil and empty headers or bodies are
// equal.
func diffEnvelope(got, want transport.Envelope) []string {
	var diffs []string
	field := func(name, g, w string) {
		if g != w {
			diffs = append(diffs, fmt.Sprintf("%s: got %q, want %q", name, g, w))
		}
	}
	field("ID", got.ID, want.ID)
	field("Type", got.Type, want.Type)
	field("CorrelationID", got.CorrelationID, want.CorrelationID)
	field("CausationID", got.CausationID, want.CausationID)
	field("IdempotencyKey", got.IdempotencyKey, want.IdempotencyKey)
	if len(got.Headers) != len(want.Headers) || (len(want.Headers) > 0 && !maps.Equal(got.Headers, want.Headers)) {
		diffs = append(diffs, fmt.Sprintf("Headers: got %v, want %v", got.Headers, want.Headers))
	}
	g, w := got.SentAt.UTC().Truncate(time.Microsecond), want.SentAt.UTC().Truncate(time.Microsecond)
	if !g.Equal(w) {
		diffs = append(diffs, fmt.Sprintf("SentAt: got %v, want %v", got.SentAt, want.SentAt))
	}
	if !bytes.Equal(got.Body, want.Body) {
		diffs = append(diffs, fmt.Sprintf("Body: got %q, want %q", got.Body, want.Body))
	}
	return diffs
}

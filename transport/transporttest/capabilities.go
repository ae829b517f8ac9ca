package transporttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
)

// capability returns tr as the capability interface T. It skips the test
// when the Features field is false (saying so when tr implements T
// anyway, so that a report shows what is not checked) and fails it when
// the field is true and tr does not implement T.
func capability[T any](t *testing.T, tr transport.Transport, claimed bool, field, iface string) T {
	t.Helper()
	c, ok := tr.(T)
	switch {
	case claimed && !ok:
		t.Fatalf("Features.%s is true but the transport (%T) does not implement %s", field, tr, iface)
	case !claimed && ok:
		t.Skipf("the transport implements %s but Features.%s is false: set it so that the suite checks the capability", iface, field)
	case !claimed:
		t.Skipf("transport does not implement %s: Features.%s is false", iface, field)
	}
	return c
}

// receivePartition calls ReceivePartition(part, parts) until it has handed
// out every ID of want at least once (redeliveries are counted once),
// acking each batch, and fails the test if it hands out anything else or
// wait passes first. An Ack fenced because a lease ran out on a loaded
// machine is no failure: the message comes back.
func receivePartition(t *testing.T, tr transport.Transport, pc transport.PartitionedConsumer, part, parts int, want map[string]bool, wait time.Duration, why func(id string) string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	seen := map[string]bool{}
	for len(seen) < len(want) {
		ds, err := pc.ReceivePartition(ctx, len(want), part, parts)
		if err != nil {
			var missing []string
			for id := range want {
				if !seen[id] {
					missing = append(missing, why(id))
				}
			}
			slices.Sort(missing)
			t.Fatalf("ReceivePartition(part %d of %d) handed out %d of its %d messages within %v (%v); missing: %s",
				part, parts, len(seen), len(want), wait, err, strings.Join(missing, "; "))
		}
		for _, d := range ds {
			if !want[d.Envelope.ID] {
				t.Fatalf("ReceivePartition(part %d of %d) handed out %s, which is not in the partition: %s", part, parts, describe(d), why(d.Envelope.ID))
			}
			seen[d.Envelope.ID] = true
		}
		if err := tr.Ack(t.Context(), ds); err != nil && !errors.Is(err, transport.ErrLeaseLost) {
			t.Fatalf("Ack of %s: %v", describe(ds...), err)
		}
	}
}

func (s *suite) partitionedReceive(t *testing.T) {
	tr := s.setup(t)
	pc := capability[transport.PartitionedConsumer](t, tr, s.f.Partitioned, "Partitioned", "transport.PartitionedConsumer")
	const parts = 3
	envs := envelopes("part", 36)
	for i := range envs {
		if i%6 == 0 {
			envs[i].CorrelationID = "" // partitioned by its ID
		}
	}
	want := make([]map[string]bool, parts)
	where := map[string]string{}
	for i := range want {
		want[i] = map[string]bool{}
	}
	for _, e := range envs {
		p := transport.PartitionOf(transport.PartitionKey(&e), parts)
		want[p][e.ID] = true
		where[e.ID] = fmt.Sprintf("%s (correlation ID %q) belongs to partition %d", e.ID, e.CorrelationID, p)
	}
	for p := range want {
		if len(want[p]) == 0 {
			t.Fatalf("transporttest: no envelope of the case falls in partition %d; change the case", p)
		}
	}
	publish(t, tr, envs...)
	why := func(id string) string { return where[id] }
	// The last partition first: a transport that hands out in publication
	// order whatever the partition fails at once.
	for p := parts - 1; p >= 0; p-- {
		receivePartition(t, tr, pc, p, parts, want[p], promptWait, why)
	}
}

func (s *suite) partitionedKeyForms(t *testing.T) {
	tr := s.setup(t)
	pc := capability[transport.PartitionedConsumer](t, tr, s.f.Partitioned, "Partitioned", "transport.PartitionedConsumer")
	// One saga key in three forms: a start in NFC, a completion in NFD
	// from another producer, and one with spaces around it.
	forms := []string{"caf\u00e9", "cafe\u0301", " cafe\u0301 "}
	// A partition count under which the raw forms hash apart, so that a
	// transport hashing the raw CorrelationID puts the completion
	// elsewhere and it overtakes (or is overtaken by) its start.
	parts := 0
	for n := 2; n <= 64 && parts == 0; n++ {
		if transport.PartitionHash(forms[0])%uint32(n) != transport.PartitionHash(forms[1])%uint32(n) {
			parts = n
		}
	}
	if parts == 0 {
		t.Fatal("transporttest: the raw forms of the key hash alike modulo 2 to 64; change the case")
	}
	part := transport.PartitionOf(transport.PartitionKey(&transport.Envelope{CorrelationID: forms[0]}), parts)
	envs := envelopes("form", len(forms))
	want := map[string]bool{}
	where := map[string]string{}
	for i := range envs {
		envs[i].CorrelationID = forms[i]
		want[envs[i].ID] = true
		where[envs[i].ID] = fmt.Sprintf("%s (correlation ID %q, raw hash in partition %d)", envs[i].ID, forms[i], transport.PartitionHash(forms[i])%uint32(parts))
	}
	publish(t, tr, envs...)
	receivePartition(t, tr, pc, part, parts, want, promptWait, func(id string) string {
		return where[id] + fmt.Sprintf(", but its canonical key %q is in partition %d", forms[0], part)
	})
}

// jsonBody returns a JSON string of exactly n bytes (n ≥ 2).
func jsonBody(n int) []byte {
	b := bytes.Repeat([]byte("x"), n)
	b[0], b[n-1] = '"', '"'
	return b
}

func (s *suite) sizeLimit(t *testing.T) {
	tr := s.setup(t)
	l := capability[transport.SizeLimiter](t, tr, s.f.SizeLimit, "SizeLimit", "transport.SizeLimiter")
	n := l.MaxMessageBytes()
	if n < 2 {
		t.Fatalf("Features.SizeLimit is true but MaxMessageBytes is %d, want a positive limit", n)
	}
	over := envelopes("size-over", 1)[0]
	over.Body = jsonBody(n + 1)
	ctx, cancel := context.WithTimeout(t.Context(), promptWait)
	defer cancel()
	if err := tr.Publish(ctx, []transport.Envelope{over}); !errors.Is(err, transport.ErrTooLarge) {
		t.Errorf("Publish of a body of MaxMessageBytes+1 = %d bytes: got %v, want an error wrapping transport.ErrTooLarge", n+1, err)
	}
	at := envelopes("size-at", 1)[0]
	at.Body = jsonBody(n)
	if err := tr.Publish(ctx, []transport.Envelope{at}); err != nil {
		t.Fatalf("Publish of a body of MaxMessageBytes = %d bytes: %v", n, err)
	}
	// A large message may take much of a lease to arrive on a loaded
	// machine, and its Ack then be fenced (ErrLeaseLost): at least once,
	// not a failure of the limit. It comes back, and is acked then.
	deadline := time.Now().Add(promptWait + s.f.redeliveryWait())
	for {
		d := receiveOne(t, tr, time.Until(deadline))
		if d.Envelope.ID != at.ID {
			t.Fatalf("got %s (a body of %d bytes), want %s: a body over MaxMessageBytes was delivered", describe(d), len(d.Envelope.Body), at.ID)
		}
		if !bytes.Equal(d.Envelope.Body, at.Body) {
			t.Fatalf("a body of MaxMessageBytes = %d bytes came back as %d bytes, not byte for byte", n, len(d.Envelope.Body))
		}
		err := tr.Ack(t.Context(), []transport.Delivery{d})
		if err == nil {
			break
		}
		if !errors.Is(err, transport.ErrLeaseLost) || !time.Now().Before(deadline) {
			t.Fatalf("Ack of %s: %v", describe(d), err)
		}
		t.Logf("Ack of %s fenced, its lease ran out while it arrived; receiving it again: %v", describe(d), err)
	}
	expectNothing(t, tr, s.f.quietWait())
}

// pendingTries is how many fresh transports PendingCounts tries before it
// concludes that Pending never shows an unacked count within a lease.
const pendingTries = 3

func (s *suite) pendingCounts(t *testing.T) {
	var last string
	for try := 1; try <= pendingTries; try++ {
		var ok bool
		if ok, last = s.pendingCountsOnce(t); ok {
			return
		}
		t.Logf("try %d of %d: %s", try, pendingTries, last)
	}
	t.Fatalf("in %d tries on fresh transports, %s", pendingTries, last)
}

// pendingCountsOnce runs the PendingCounts case on a fresh transport. It
// fails the test for a wrong count that no lease can explain, and returns
// false with what it saw when Pending did not show the held deliveries as
// unacked before their lease ran out.
func (s *suite) pendingCountsOnce(t *testing.T) (bool, string) {
	tr := s.setup(t)
	pc := capability[transport.PendingCounter](t, tr, s.f.Pending, "Pending", "transport.PendingCounter")

	// poll calls Pending until it reports (ready, unacked) and returns
	// true, or returns false with the last counts once deadline passes.
	poll := func(ready, unacked int, deadline time.Time) (bool, string) {
		pause := min(s.f.Lease/10, 50*time.Millisecond)
		var got string
		for {
			ctx, cancel := context.WithDeadline(t.Context(), deadline.Add(promptWait))
			r, u, err := pc.Pending(ctx)
			cancel()
			if err == nil && r == ready && u == unacked {
				return true, ""
			}
			got = fmt.Sprintf("%d ready, %d unacked (err %v)", r, u, err)
			if !time.Now().Before(deadline) {
				return false, got
			}
			select { // polling with a deadline: a broker's counts trail its confirms
			case <-time.After(pause):
			case <-t.Context().Done():
				return false, got
			}
		}
	}
	// stable expects counts that no lease can change.
	stable := func(ready, unacked int, when string) {
		t.Helper()
		if ok, got := poll(ready, unacked, time.Now().Add(promptWait)); !ok {
			t.Fatalf("Pending %s: got %s within %v, want %d ready, %d unacked", when, got, promptWait, ready, unacked)
		}
	}
	// held expects counts with deliveries handed out at since: they are
	// unacked only while their lease lasts.
	held := func(ready, unacked int, since time.Time, when string) (bool, string) {
		ok, got := poll(ready, unacked, since.Add(s.f.Lease))
		if !ok {
			return false, fmt.Sprintf("Pending %s was never %d ready, %d unacked within the %v lease; last %s", when, ready, unacked, s.f.Lease, got)
		}
		return true, ""
	}

	stable(0, 0, "of a fresh transport")
	publish(t, tr, envelopes("pending", 5)...)
	stable(5, 0, "after publishing 5 messages")

	ds := receive(t, tr, 2, promptWait)
	since := time.Now()
	if ok, why := held(3, 2, since, "after receiving 2 of 5"); !ok {
		return false, why
	}
	if err := tr.Ack(t.Context(), ds[:1]); errors.Is(err, transport.ErrLeaseLost) {
		return false, "the lease of a held delivery ran out before the case acked it"
	} else if err != nil {
		t.Fatalf("Ack of %s: %v", describe(ds[0]), err)
	}
	if ok, why := held(3, 1, since, "after receiving 2 of 5 and acking 1"); !ok {
		return false, why
	}
	if err := tr.Ack(t.Context(), ds[1:]); errors.Is(err, transport.ErrLeaseLost) {
		return false, "the lease of a held delivery ran out before the case acked it"
	} else if err != nil {
		t.Fatalf("Ack of %s: %v", describe(ds[1]), err)
	}
	stable(3, 0, "after acking both deliveries received")

	rest := receive(t, tr, 3, promptWait)
	if err := tr.Ack(t.Context(), rest); errors.Is(err, transport.ErrLeaseLost) {
		return false, "the lease of a delivery ran out before the case acked it"
	} else if err != nil {
		t.Fatalf("Ack of %s: %v", describe(rest...), err)
	}
	stable(0, 0, "after acking every message")

	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if r, u, err := pc.Pending(t.Context()); !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Pending after Close: got %d, %d, %v; want transport.ErrClosed", r, u, err)
	}
	return true, ""
}

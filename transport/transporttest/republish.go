package transporttest

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/idemhq/idem/transport"
)

// republished returns a copy of env marked as a deliberate re-publish
// (transport.HeaderRepublish) with mark, as a dead letter's replay or a
// "retry now" publishes it: same ID, same body.
func republished(env transport.Envelope, mark string) transport.Envelope {
	cp := env.Clone()
	cp.Headers = maps.Clone(cp.Headers)
	if cp.Headers == nil {
		cp.Headers = map[string]string{}
	}
	cp.Headers[transport.HeaderRepublish] = mark
	return cp
}

// checkCopy fails the test unless d is the first delivery of want.
func checkCopy(t *testing.T, d transport.Delivery, want transport.Envelope, what string) {
	t.Helper()
	if d.Attempt != 1 {
		t.Errorf("%s: got %s, want attempt 1", what, describe(d))
	}
	for _, diff := range diffEnvelope(d.Envelope, want) {
		t.Errorf("%s: delivered envelope differs: %s", what, diff)
	}
}

// republishAfterAck is a dead letter's replay: the message was handed out
// and settled (the engine acks what it dead-letters), and a deliberate
// re-publish under the same ID, moments later, must be delivered, and so
// must a second one with another mark.
func (s *suite) republishAfterAck(t *testing.T) {
	tr := s.setup(t)
	env := envelopes("republish-acked", 1)[0]
	publish(t, tr, env)
	ack(t, tr, receiveOne(t, tr, promptWait))
	for _, mark := range []string{"replay 1", "replay 2"} {
		cp := republished(env, mark)
		publish(t, tr, cp)
		d := receiveOne(t, tr, promptWait)
		checkCopy(t, d, cp, "re-publish "+mark+" of an acked message")
		ack(t, tr, d)
	}
}

// republishWhileDelayed is a "retry now": the message waits out a Nack
// delay in the transport, and a deliberate re-publish under the same ID
// must be delivered at once, not dropped as a duplicate of the waiting
// one nor held back until the delay ends.
func (s *suite) republishWhileDelayed(t *testing.T) {
	tr := s.setup(t)
	env := envelopes("republish-delayed", 1)[0]
	publish(t, tr, env)
	d1 := receiveOne(t, tr, promptWait)
	delay := 3 * promptWait // far beyond the wait for the copy below
	if err := tr.Nack(t.Context(), d1, delay); err != nil {
		t.Fatalf("Nack(%s, %v): %v", describe(d1), delay, err)
	}
	cp := republished(env, "retry now 1")
	publish(t, tr, cp)
	ctx, cancel := context.WithTimeout(t.Context(), promptWait)
	defer cancel()
	for {
		ds, err := tr.Receive(ctx, 1)
		if err != nil {
			t.Fatalf("the re-publish of a message waiting out a Nack delay of %v was not delivered within %v: %v", delay, promptWait, err)
		}
		d := ds[0]
		if d.Envelope.Headers[transport.HeaderRepublish] == "" {
			if s.f.NativeDelay {
				t.Fatalf("got %s before its Nack delay of %v ended, want only the re-published copy", describe(d), delay)
			}
			ack(t, tr, d) // a transport without native delays hands it out early
			continue
		}
		checkCopy(t, d, cp, "re-publish of a message waiting out a Nack delay")
		ack(t, tr, d)
		return
	}
}

// republishDedup checks, on a transport that drops re-published copies
// (Features.PublishDedup), that it deduplicates by transport.PublishID:
// the same mark twice, or the plain envelope again, is dropped; another
// mark is not.
func (s *suite) republishDedup(t *testing.T) {
	if !s.f.PublishDedup {
		t.Skip("transport delivers every publish: Features.PublishDedup is false")
	}
	tr := s.setup(t)
	env := envelopes("republish-dedup", 1)[0]
	a, b := republished(env, "mark a"), republished(env, "mark b")
	publish(t, tr, env)
	publish(t, tr, a)
	publish(t, tr, a, env) // duplicates of both
	publish(t, tr, b)
	got := s.drain(t, tr)
	want := map[string]transport.Envelope{"": env, "mark a": a, "mark b": b}
	byMark := map[string]transport.Delivery{}
	for _, d := range got {
		byMark[d.Envelope.Headers[transport.HeaderRepublish]] = d
	}
	if len(got) != len(want) || len(byMark) != len(want) {
		t.Fatalf("published the plain envelope twice, mark a twice and mark b once: got %s, want 3 deliveries (plain, a, b)", describe(got...))
	}
	for mark, w := range want {
		d, ok := byMark[mark]
		if !ok {
			t.Fatalf("no delivery with mark %q among %s", mark, describe(got...))
		}
		checkCopy(t, d, w, "delivery with mark "+mark)
	}
}

// drain receives and acks until nothing arrives for Features.quietWait.
func (s *suite) drain(t *testing.T, tr transport.Transport) []transport.Delivery {
	t.Helper()
	var got []transport.Delivery
	for {
		ctx, cancel := context.WithTimeout(t.Context(), s.f.quietWait())
		ds, err := tr.Receive(ctx, 10)
		cancel()
		if err != nil {
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Receive: %v", err)
			}
			return got
		}
		ack(t, tr, ds...)
		got = append(got, ds...)
	}
}

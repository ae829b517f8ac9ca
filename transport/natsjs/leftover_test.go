package natsjs_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
)

// A message that a waiting pull request brought and that waited for a
// Receive (a leftover) must be handed out with a lease that lasts until
// the engine's first renewal, a third of AckWait later: else the renewal
// comes too late, and the server hands the message out again while its
// batch still runs.
func TestLeftoverHandedOutWithALeaseToRenew(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	tr := open(t, natsjs.Config{AckWait: ackWait})
	// A Receive that gives up leaves its pull requests waiting.
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	_, err := tr.Receive(ctx, 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on an empty stream: got %v, want context.DeadlineExceeded", err)
	}
	if err := tr.Publish(t.Context(), []transport.Envelope{{ID: "left-1", Type: "T", SentAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	// Poll until the leftover's lease is shorter than the renewal period.
	deadline := time.Now().Add(ackWait)
	for {
		left, ok := tr.HeldLeaseLeft()
		if ok && left < ackWait*3/10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no leftover with under %v of lease after %v (held: %v, lease left %v)", ackWait*3/10, ackWait, ok, left)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	rctx, rcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer rcancel()
	ds, err := tr.Receive(rctx, 1)
	if err != nil || len(ds) != 1 || ds[0].Envelope.ID != "left-1" || ds[0].Attempt != 1 {
		t.Fatalf("Receive of the leftover: got %v, %v; want attempt 1 of left-1", ds, err)
	}
	// Renew as the engine does, every third of AckWait, for 1.5 AckWait,
	// while nothing may be handed out again.
	renewed := make(chan error, 1)
	go func() {
		tick := time.NewTicker(ackWait / 3)
		defer tick.Stop()
		for range 4 {
			<-tick.C
			if err := tr.ExtendLeases(t.Context(), ds); err != nil {
				renewed <- err
				return
			}
		}
		renewed <- nil
	}()
	qctx, qcancel := context.WithTimeout(t.Context(), ackWait*3/2)
	defer qcancel()
	if again, err := tr.Receive(qctx, 1); err == nil {
		t.Errorf("handed out again while its lease was renewed: %s attempt %d", again[0].Envelope.ID, again[0].Attempt)
	}
	if err := <-renewed; err != nil {
		t.Errorf("renewal of the leftover's lease: %v", err)
	}
	if err := tr.Ack(t.Context(), ds); err != nil {
		t.Errorf("Ack after the renewals: %v", err)
	}
}

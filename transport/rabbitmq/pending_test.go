package rabbitmq_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/rabbitmq"
)

// waitPending polls tr.Pending until it reports want (the broker's counts
// follow confirms closely but not atomically), failing at the deadline.
func waitPending(t *testing.T, tr *rabbitmq.Transport, wantReady, wantUnacked int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var ready, unacked int
	var err error
	for ctx.Err() == nil {
		if ready, unacked, err = tr.Pending(ctx); err == nil && ready == wantReady && unacked == wantUnacked {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond): // polling the broker with a deadline
		}
	}
	t.Fatalf("Pending = %d ready, %d unacked, %v; want %d, %d", ready, unacked, err, wantReady, wantUnacked)
}

// Pending counts what waits in the partition and delay queues or in this
// transport's prefetch buffer, and what it handed out unacknowledged;
// another connection's deliveries are not visible, and count as ready once
// that connection is gone.
func TestPending(t *testing.T) {
	ns := namespace(t, 4)
	cfg := rabbitmq.Config{Namespace: ns, Partitions: 4, Lease: time.Minute}
	pub := open(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	waitPending(t, pub, 0, 0)
	var envs []transport.Envelope
	for i := range 6 {
		envs = append(envs, transport.Envelope{ID: fmt.Sprintf("m%d", i), Type: "t", CorrelationID: fmt.Sprintf("k%d", i), Body: []byte(`{}`)})
	}
	if err := pub.Publish(ctx, envs); err != nil {
		t.Fatal(err)
	}
	waitPending(t, pub, 6, 0)

	// Another connection takes them: the broker no longer counts them
	// ready, and only their holder counts them unacknowledged.
	cons := open(t, cfg)
	got := 0
	var held []transport.Delivery
	for got < 6 {
		ds, err := cons.Receive(ctx, 6-got)
		if err != nil {
			t.Fatal(err)
		}
		got += len(ds)
		held = append(held, ds...)
	}
	waitPending(t, pub, 0, 0)
	waitPending(t, cons, 0, 6)

	// A delayed nack parks the message in a delay queue: ready there.
	if err := cons.Nack(ctx, held[0], 30*time.Second); err != nil {
		t.Fatal(err)
	}
	waitPending(t, cons, 1, 5)
	if err := cons.Ack(ctx, held[1:3]); err != nil {
		t.Fatal(err)
	}
	waitPending(t, cons, 1, 3)

	// The holder goes away: its unacknowledged deliveries are ready again.
	if err := cons.Close(); err != nil {
		t.Fatal(err)
	}
	waitPending(t, pub, 4, 0)
}

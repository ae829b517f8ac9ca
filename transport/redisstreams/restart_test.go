package redisstreams_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/redisstreams"
)

// The server crashes (SIGKILL) and restarts on its append-only file: a
// Publish and a Receive made meanwhile wait for it and then complete, and
// a delivery held across the crash can still be acknowledged, because the
// consumer group's pending entries, with their owners and delivery
// counts, were fsynced before the server answered.
func TestSurvivesServerCrashAndRestart(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tr, err := redisstreams.Open(ctx, s.url(), &redisstreams.Config{Partitions: 2, Lease: time.Minute, ReconnectMin: 10 * time.Millisecond, ReconnectMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	publish(t, tr, env("before", "k1"))
	held := receive(t, tr, 1, 5*time.Second)

	type result struct {
		ds  []transport.Delivery
		err error
	}
	received := make(chan result, 1)
	go func() {
		ds, err := tr.Receive(ctx, 1)
		received <- result{ds, err}
	}()
	s.crash(t)
	published := make(chan error, 1)
	go func() { published <- tr.Publish(ctx, []transport.Envelope{env("after", "k2")}) }()
	s.start(t)

	if err := <-published; err != nil {
		t.Fatalf("Publish across the restart: %v", err)
	}
	r := <-received
	if r.err != nil || len(r.ds) != 1 || r.ds[0].Envelope.ID != "after" || r.ds[0].Attempt != 1 {
		t.Fatalf("Receive across the restart: %v, %v; want after, attempt 1", r.ds, r.err)
	}
	if err := tr.Ack(ctx, held); err != nil {
		t.Fatalf("Ack of a delivery held across the restart: %v", err)
	}
	if err := tr.Ack(ctx, r.ds); err != nil {
		t.Fatal(err)
	}
	if ready, unacked, err := tr.Pending(ctx); err != nil || ready != 0 || unacked != 0 {
		t.Fatalf("Pending = %d, %d, %v; want nothing left", ready, unacked, err)
	}
}

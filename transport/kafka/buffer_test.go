package kafka_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/kafka"
)

// inPartition returns n envelopes whose saga keys land in partition part
// of parts.
func inPartition(t *testing.T, prefix string, n, part, parts int) []transport.Envelope {
	t.Helper()
	var out []transport.Envelope
	for i := 0; len(out) < n && i < 100*n; i++ {
		e := transport.Envelope{ID: fmt.Sprintf("%s-%d", prefix, i), Type: "test.Ping", CorrelationID: fmt.Sprintf("%s-key-%d", prefix, i), SentAt: time.Now()}
		if transport.PartitionOf(transport.PartitionKey(&e), parts) == part {
			out = append(out, e)
		}
	}
	if len(out) < n {
		t.Fatalf("found %d of %d keys for partition %d", len(out), n, part)
	}
	return out
}

// A partition whose oldest record stays unsettled (nacked with a long
// delay, as a retry backoff does) fills its share of the buffer and is no
// longer fetched; the other partitions keep flowing, and once the record
// is settled the partition moves on.
func TestFullPartitionDoesNotStallOthersOnKfake(t *testing.T) { fullPartition(t, kfakeURL(t)) }

func TestFullPartitionDoesNotStallOthersOnKafka(t *testing.T) { fullPartition(t, realURL(t)) }

func fullPartition(t *testing.T, url string) {
	cfg := testConfig(topicFor(t), 30*time.Second)
	cfg.MaxBuffered = 3
	tr := open(t, url, cfg)
	defer tr.Close()
	stuck := inPartition(t, "stuck", 12, 0, cfg.Partitions)
	free := inPartition(t, "free", 8, 1, cfg.Partitions)
	if err := tr.Publish(t.Context(), stuck); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	if err := tr.Publish(t.Context(), free); err != nil {
		t.Fatalf("Publish: %v", err)
	}

	// Hold partition 0's first record (nacked with a delay, as a retry
	// backoff does); ack everything else as it comes.
	const delay = 5 * time.Second
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var head transport.Delivery
	got := map[string]bool{}
	handle := func(ds []transport.Delivery) {
		for _, d := range ds {
			if p, off := kafka.PartitionOffset(d); p == 0 && off == 0 && head.Token == "" {
				head = d
				if err := tr.Nack(ctx, d, delay); err != nil {
					t.Fatalf("Nack: %v", err)
				}
				continue
			}
			got[d.Envelope.ID] = true
			if err := tr.Ack(ctx, []transport.Delivery{d}); err != nil {
				t.Fatalf("Ack: %v", err)
			}
		}
	}
	count := func(es []transport.Envelope) (n int) {
		for _, e := range es {
			if got[e.ID] {
				n++
			}
		}
		return n
	}
	for count(free) < len(free) {
		ds, err := tr.Receive(ctx, 100)
		if err != nil {
			t.Fatalf("partition 1 delivered %d of %d records while partition 0's head was held: %v", count(free), len(free), err)
		}
		handle(ds)
	}
	// Whatever partition 0 still hands out before the head's delay ends.
	quiet, stop := context.WithTimeout(ctx, delay/3)
	for {
		ds, err := tr.Receive(quiet, 100)
		if err != nil {
			break
		}
		handle(ds)
	}
	stop()
	if head.Token == "" {
		t.Fatal("partition 0's first record was never handed out")
	}
	if n := count(stuck); n > 2*cfg.MaxBuffered {
		t.Fatalf("partition 0 handed out %d records behind its unsettled head, want at most about MaxBuffered (%d): the partition was not paused", n, cfg.MaxBuffered)
	}
	// The head comes back after its delay; settled (the engine acks what
	// it dead-letters), the partition moves on.
	for count(stuck) < len(stuck)-1 || head.Attempt < 2 {
		ds, err := tr.Receive(ctx, 100)
		if err != nil {
			t.Fatalf("after the head's delay, partition 0 delivered %d of its %d records (head attempt %d): %v", count(stuck), len(stuck)-1, head.Attempt, err)
		}
		for _, d := range ds {
			if d.Envelope.ID == head.Envelope.ID {
				head = d
			}
		}
		handle(ds)
	}
}

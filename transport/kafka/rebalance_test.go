package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/kafka"
)

func envs(prefix string, n int) []transport.Envelope {
	out := make([]transport.Envelope, n)
	for i := range out {
		id := fmt.Sprintf("%s-%d", prefix, i)
		out[i] = transport.Envelope{ID: id, Type: "test.Ping", CorrelationID: "key-" + id, SentAt: time.Now(), Body: []byte(`{}`)}
	}
	return out
}

// receiveIDs receives until it has every ID of want, failing on anything
// else, and returns the deliveries.
func receiveIDs(t *testing.T, tr transport.Transport, want map[string]bool, wait time.Duration) []transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	seen := map[string]bool{}
	var got []transport.Delivery
	for len(seen) < len(want) {
		ds, err := tr.Receive(ctx, 100)
		if err != nil {
			t.Fatalf("Receive: got %d of %d messages: %v", len(seen), len(want), err)
		}
		for _, d := range ds {
			if !want[d.Envelope.ID] {
				t.Fatalf("received %s (attempt %d), which is not among the messages expected", d.Envelope.ID, d.Attempt)
			}
			seen[d.Envelope.ID] = true
		}
		got = append(got, ds...)
	}
	return got
}

// expectQuiet fails if tr hands anything out within wait.
func expectQuiet(t *testing.T, tr transport.Transport, wait time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	ds, err := tr.Receive(ctx, 100)
	if err == nil {
		ids := make([]string, len(ds))
		for i, d := range ds {
			ids[i] = d.Envelope.ID
		}
		t.Fatalf("received %v, want nothing within %v", ids, wait)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive: %v", err)
	}
}

func idSet(es []transport.Envelope) map[string]bool {
	m := map[string]bool{}
	for _, e := range es {
		m[e.ID] = true
	}
	return m
}

// A member leaves mid-batch: it acked the first half of each partition's
// records and holds the rest. The member that takes the partitions over
// hands out every record it did not ack (nothing unacked is lost), and
// none that it acked (nothing acked is replayed past its commit).
func TestMemberLeavesMidBatchOnKfake(t *testing.T) { memberLeavesMidBatch(t, kfakeURL(t)) }

func TestMemberLeavesMidBatchOnKafka(t *testing.T) { memberLeavesMidBatch(t, realURL(t)) }

func memberLeavesMidBatch(t *testing.T, url string) {
	cfg := testConfig(topicFor(t), 30*time.Second)
	a := open(t, url, cfg)
	batch := envs("batch", 40)
	if err := a.Publish(t.Context(), batch); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	ds := receiveIDs(t, a, idSet(batch), 10*time.Second)
	byPart := map[int32][]transport.Delivery{}
	for _, d := range ds {
		p, _ := kafka.PartitionOffset(d)
		byPart[p] = append(byPart[p], d)
	}
	var acked []transport.Delivery
	unacked := map[string]bool{}
	for _, pds := range byPart {
		slices.SortFunc(pds, func(x, y transport.Delivery) int {
			_, ox := kafka.PartitionOffset(x)
			_, oy := kafka.PartitionOffset(y)
			return int(ox - oy)
		})
		half := len(pds) / 2
		acked = append(acked, pds[:half]...)
		for _, d := range pds[half:] {
			unacked[d.Envelope.ID] = true
		}
	}
	if len(acked) == 0 || len(unacked) == 0 {
		t.Fatalf("the case needs acked and unacked records: %d acked, %d unacked", len(acked), len(unacked))
	}
	if err := a.Ack(t.Context(), acked); err != nil {
		t.Fatalf("Ack of the first half of each partition: %v", err)
	}
	if err := a.Close(); err != nil { // leaves the group mid-batch
		t.Fatalf("Close: %v", err)
	}
	b := open(t, url, cfg)
	defer b.Close()
	got := receiveIDs(t, b, unacked, 20*time.Second)
	if err := b.Ack(t.Context(), got); err != nil {
		t.Fatalf("Ack: %v", err)
	}
	expectQuiet(t, b, time.Second)
}

// A second member joins while the first holds a batch: the first stops
// handing out the partitions it gives up and waits for its deliveries in
// flight; acks that come during the wait succeed and are committed
// before the partitions move, so the new owner replays none of them.
func TestRebalanceDrainsInFlightOnKfake(t *testing.T) { rebalanceDrains(t, kfakeURL(t)) }

func TestRebalanceDrainsInFlightOnKafka(t *testing.T) { rebalanceDrains(t, realURL(t)) }

func rebalanceDrains(t *testing.T, url string) {
	cfg := testConfig(topicFor(t), 30*time.Second)
	a := open(t, url, cfg)
	defer a.Close()
	started, done := make(chan []int32, 4), make(chan []int32, 4)
	kafka.SetDrainHooks(a, func(ps []int32) { started <- ps }, func(ps []int32) { done <- ps })
	batch := envs("held", 40)
	if err := a.Publish(t.Context(), batch); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	held := receiveIDs(t, a, idSet(batch), 10*time.Second)

	b := open(t, url, cfg)
	defer b.Close()
	type result struct {
		ds  []transport.Delivery
		err error
	}
	bctx, bcancel := context.WithCancel(t.Context())
	defer bcancel()
	first := make(chan result, 1)
	go func() { // B joins the group with its first Receive
		ds, err := b.Receive(bctx, 100)
		first <- result{ds, err}
	}()
	var revoked []int32
	select {
	case revoked = <-started:
	case <-time.After(20 * time.Second):
		t.Fatal("no revoke began within 20s of a second member joining")
	}
	// The acks of the whole batch come while the revoke waits for them.
	if err := a.Ack(t.Context(), held); err != nil {
		t.Fatalf("Ack during the drain of partitions %v: %v (want every ack accepted: the revoke waits for them)", revoked, err)
	}
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("the revoke did not finish within 20s of the batch being acked")
	}
	select {
	case r := <-first:
		t.Fatalf("the new member received %d deliveries (%v) of a batch acked before the rebalance", len(r.ds), r.err)
	case <-time.After(time.Second):
	}
	bcancel()
	<-first

	// New messages spread over both members, once each.
	next := envs("after", 40)
	if err := a.Publish(t.Context(), next); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	want := idSet(next)
	seen := map[string]int{}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	results := make(chan []transport.Delivery)
	for _, tr := range []*kafka.Transport{a, b} {
		go func() {
			for {
				ds, err := tr.Receive(ctx, 100)
				if err != nil {
					return
				}
				_ = tr.Ack(ctx, ds)
				select {
				case results <- ds:
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	for len(seen) < len(want) {
		select {
		case ds := <-results:
			for _, d := range ds {
				if !want[d.Envelope.ID] {
					t.Fatalf("after the rebalance, %s (attempt %d) was handed out again", d.Envelope.ID, d.Attempt)
				}
				seen[d.Envelope.ID]++
			}
		case <-ctx.Done():
			t.Fatalf("after the rebalance the two members handed out %d of %d new messages", len(seen), len(want))
		}
	}
	cancel()
}

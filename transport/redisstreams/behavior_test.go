package redisstreams_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/redisstreams"
)

// rawClient is a plain client of the shared test server.
func rawClient(t *testing.T) *redis.Client {
	t.Helper()
	opt, err := redis.ParseURL(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func env(id, key string) transport.Envelope {
	return transport.Envelope{ID: id, Type: "test.Ping", CorrelationID: key, SentAt: time.Now(), Body: []byte(`{"id":"` + id + `"}`)}
}

func publish(t *testing.T, tr transport.Transport, envs ...transport.Envelope) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Publish(ctx, envs); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

// receive calls Receive until it has n deliveries, within wait.
func receive(t *testing.T, tr transport.Transport, n int, wait time.Duration) []transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	var got []transport.Delivery
	for len(got) < n {
		ds, err := tr.Receive(ctx, n-len(got))
		if err != nil {
			t.Fatalf("Receive: got %d of %d deliveries within %v: %v", len(got), n, wait, err)
		}
		got = append(got, ds...)
	}
	return got
}

// nothing fails if a delivery arrives within wait.
func nothing(t *testing.T, tr transport.Transport, wait time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if ds, err := tr.Receive(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %d deliveries (%v), want none within %v", len(ds), err, wait)
	}
}

func pending(t *testing.T, tr *redisstreams.Transport) (int, int) {
	t.Helper()
	ready, unacked, err := tr.Pending(context.Background())
	if err != nil {
		t.Fatalf("Pending: %v", err)
	}
	return ready, unacked
}

func wantPending(t *testing.T, tr *redisstreams.Transport, ready, unacked int) {
	t.Helper()
	if r, u := pending(t, tr); r != ready || u != unacked {
		t.Fatalf("Pending = %d ready, %d unacked; want %d, %d", r, u, ready, unacked)
	}
}

// Another process's consumer reclaims an expired delivery: the first
// holder's late Ack and Nack are refused with ErrLeaseLost and change
// nothing, the new holder's Ack settles the message.
func TestLateSettlementAfterReclaimByAnotherConsumer(t *testing.T) {
	ns := namespace(t)
	const lease = 300 * time.Millisecond
	cfg := redisstreams.Config{Namespace: ns, Partitions: 2, Lease: lease}
	first, second := open(t, cfg), open(t, cfg)
	publish(t, first, env("m1", "k1"))
	d1 := receive(t, first, 1, 5*time.Second)[0]
	d2 := receive(t, second, 1, 5*time.Second)[0] // after the lease expired
	if d2.Envelope.ID != "m1" || d2.Attempt != 2 || d1.Attempt != 1 {
		t.Fatalf("got attempts %d then %d of %s, want 1 then 2 of m1", d1.Attempt, d2.Attempt, d2.Envelope.ID)
	}
	ctx := context.Background()
	err := first.Ack(ctx, []transport.Delivery{d1})
	if !errors.Is(err, transport.ErrLeaseLost) || !strings.Contains(err.Error(), second.Consumer()) {
		t.Errorf("late Ack: got %v, want ErrLeaseLost naming the new holder %s", err, second.Consumer())
	}
	if err := first.Nack(ctx, d1, 0); !errors.Is(err, transport.ErrLeaseLost) {
		t.Errorf("late Nack: got %v, want ErrLeaseLost", err)
	}
	wantPending(t, first, 0, 1) // still held by second, not requeued or acked
	if err := second.Ack(ctx, []transport.Delivery{d2}); err != nil {
		t.Fatalf("Ack by the new holder: %v", err)
	}
	wantPending(t, first, 0, 0)
	nothing(t, first, 3*lease)
}

// A Nack with a long delay does not hold back the messages behind it in
// its stream, comes back with the next attempt once due and not before,
// and counts as ready meanwhile.
func TestDelayDoesNotBlockTheStream(t *testing.T) {
	ns := namespace(t)
	tr := open(t, redisstreams.Config{Namespace: ns, Partitions: 1, Lease: time.Minute})
	publish(t, tr, env("slow", "k"))
	d := receive(t, tr, 1, 5*time.Second)[0]
	const delay = 1500 * time.Millisecond
	start := time.Now()
	if err := tr.Nack(context.Background(), d, delay); err != nil {
		t.Fatal(err)
	}
	wantPending(t, tr, 1, 0)
	publish(t, tr, env("behind-1", "k"), env("behind-2", "k"))
	got := receive(t, tr, 2, 5*time.Second)
	if got[0].Envelope.ID != "behind-1" || got[1].Envelope.ID != "behind-2" {
		t.Fatalf("got %s, %s; want behind-1 and behind-2 while slow waits", got[0].Envelope.ID, got[1].Envelope.ID)
	}
	if time.Since(start) >= delay {
		t.Fatalf("the messages behind came after the delay (%v): blocked", time.Since(start))
	}
	if err := tr.Ack(context.Background(), got); err != nil {
		t.Fatal(err)
	}
	again := receive(t, tr, 1, delay+5*time.Second)[0]
	if elapsed := time.Since(start); elapsed < delay {
		t.Errorf("redelivered %v after a Nack with delay %v", elapsed, delay)
	}
	if again.Envelope.ID != "slow" || again.Attempt != 2 {
		t.Fatalf("got %s attempt %d, want slow attempt 2", again.Envelope.ID, again.Attempt)
	}
	if err := tr.Ack(context.Background(), []transport.Delivery{again}); err != nil {
		t.Fatal(err)
	}
	wantPending(t, tr, 0, 0)
}

// A Receive blocked in another process wakes for a Nack (at once, or when
// its delay is due), not only after its PollInterval.
func TestNackWakesBlockedReceiverElsewhere(t *testing.T) {
	ns := namespace(t)
	cfg := redisstreams.Config{Namespace: ns, Partitions: 2, Lease: 10 * time.Minute, PollInterval: time.Minute}
	holder, waiter := open(t, cfg), open(t, cfg)
	publish(t, holder, env("a", "k1"), env("b", "k2"))
	ds := receive(t, holder, 2, 5*time.Second)

	for i, delay := range []time.Duration{0, 700 * time.Millisecond} {
		got := make(chan transport.Delivery, 1)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		started := make(chan struct{})
		go func() {
			close(started)
			ds, err := waiter.Receive(ctx, 1)
			if err != nil {
				t.Errorf("Receive: %v", err)
				close(got)
				return
			}
			got <- ds[0]
		}()
		<-started
		start := time.Now()
		if err := holder.Nack(context.Background(), ds[i], delay); err != nil {
			t.Fatal(err)
		}
		d, ok := <-got
		if !ok {
			return
		}
		elapsed := time.Since(start)
		if d.Envelope.ID != ds[i].Envelope.ID || d.Attempt != 2 {
			t.Fatalf("waiter got %s attempt %d, want %s attempt 2", d.Envelope.ID, d.Attempt, ds[i].Envelope.ID)
		}
		if elapsed < delay || elapsed > delay+10*time.Second {
			t.Errorf("Nack with delay %v reached the blocked receiver after %v", delay, elapsed)
		}
		if err := waiter.Ack(context.Background(), []transport.Delivery{d}); err != nil {
			t.Fatal(err)
		}
	}
}

// An entry that is not an envelope (written by another program) is handed
// out once, without a type and with its fields as the body, so that the
// engine dead-letters it; once acknowledged it is gone.
func TestForeignEntryIsHandedOutForTheDeadLetters(t *testing.T) {
	ns := namespace(t)
	tr := open(t, redisstreams.Config{Namespace: ns, Partitions: 1, Lease: time.Minute})
	c := rawClient(t)
	ctx := context.Background()
	stream := tr.Streams()[0]
	junk, err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"hello", "world"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	badMeta, err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"id", "m-bad", "meta", "{not json", "body", "x"}}).Result()
	if err != nil {
		t.Fatal(err)
	}
	ds := receive(t, tr, 2, 5*time.Second)
	want := map[string]string{
		"redis:" + stream + ":" + junk: `{"hello":"world"}`,
		"m-bad":                        `{"body":"x","id":"m-bad","meta":"{not json"}`,
	}
	for _, d := range ds {
		if d.Envelope.Type != "" || d.Attempt != 1 || string(d.Envelope.Body) != want[d.Envelope.ID] {
			t.Errorf("got %s type %q attempt %d body %s; want one of %v without a type", d.Envelope.ID, d.Envelope.Type, d.Attempt, d.Envelope.Body, want)
		}
	}
	_ = badMeta
	if err := tr.Ack(ctx, ds); err != nil {
		t.Fatal(err)
	}
	if n, err := c.XLen(ctx, stream).Result(); err != nil || n != 0 {
		t.Fatalf("XLEN after the acks = %d, %v; want 0", n, err)
	}
}

// Acknowledged entries leave the stream at once (XACK and XDEL together),
// and nothing unacknowledged is ever removed: the stream holds exactly the
// unread, pending and delayed entries, with no trimming.
func TestAckDeletesOnlyWhatItSettles(t *testing.T) {
	ns := namespace(t)
	const lease = 500 * time.Millisecond
	tr := open(t, redisstreams.Config{Namespace: ns, Partitions: 1, Lease: lease})
	c := rawClient(t)
	ctx := context.Background()
	var envs []transport.Envelope
	for i := range 200 {
		envs = append(envs, env(fmt.Sprintf("m%03d", i), fmt.Sprintf("k%d", i)))
	}
	publish(t, tr, envs...)
	ds := receive(t, tr, 150, 10*time.Second)
	var even, odd []transport.Delivery
	for i, d := range ds {
		if i%2 == 0 {
			even = append(even, d)
		} else {
			odd = append(odd, d)
		}
	}
	if err := tr.Ack(ctx, even); err != nil {
		t.Fatal(err)
	}
	if err := tr.Nack(ctx, odd[0], time.Hour); err != nil {
		t.Fatal(err)
	}
	stream := tr.Streams()[0]
	if n, err := c.XLen(ctx, stream).Result(); err != nil || n != 125 {
		t.Fatalf("XLEN = %d, %v; want 125: 50 unread, 74 pending and 1 delayed", n, err)
	}
	wantPending(t, tr, 51, 74)
	// The 74 unsettled come back after the lease, with the 50 unread.
	got := map[string]bool{}
	again := receive(t, tr, 124, 10*time.Second+lease)
	for _, d := range again {
		got[d.Envelope.ID] = true
	}
	for _, d := range odd[1:] {
		if !got[d.Envelope.ID] {
			t.Errorf("unacknowledged %s was not redelivered", d.Envelope.ID)
		}
	}
	if err := tr.Ack(ctx, again); err != nil {
		t.Fatal(err)
	}
	wantPending(t, tr, 1, 0)
}

// Pending counts every process's deliveries, and delayed messages as ready.
func TestPending(t *testing.T) {
	ns := namespace(t)
	cfg := redisstreams.Config{Namespace: ns, Partitions: 4, Lease: time.Minute}
	pub, cons := open(t, cfg), open(t, cfg)
	wantPending(t, pub, 0, 0)
	var envs []transport.Envelope
	for i := range 6 {
		envs = append(envs, env(fmt.Sprintf("m%d", i), fmt.Sprintf("k%d", i)))
	}
	publish(t, pub, envs...)
	wantPending(t, pub, 6, 0)
	held := receive(t, cons, 6, 5*time.Second)
	wantPending(t, pub, 0, 6)
	ctx := context.Background()
	if err := cons.Nack(ctx, held[0], time.Hour); err != nil {
		t.Fatal(err)
	}
	wantPending(t, pub, 1, 5)
	if err := cons.Ack(ctx, held[1:3]); err != nil {
		t.Fatal(err)
	}
	wantPending(t, pub, 1, 3)
}

// ReceivePartition hands each part only the keys that hash to it, whether
// or not the part count divides the partition count, and together the
// parts receive every message.
func TestReceivePartitionSplitsKeys(t *testing.T) {
	for _, parts := range []int{2, 3} {
		t.Run(fmt.Sprintf("parts=%d", parts), func(t *testing.T) {
			ns := namespace(t)
			tr := open(t, redisstreams.Config{Namespace: ns, Partitions: 4, Lease: time.Minute})
			const n = 120
			var envs []transport.Envelope
			for i := range n {
				envs = append(envs, env(fmt.Sprintf("m%03d", i), fmt.Sprintf("key-%d", i%40)))
			}
			publish(t, tr, envs...)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var mu sync.Mutex
			seen := map[string]int{}
			var wg sync.WaitGroup
			for part := range parts {
				wg.Go(func() {
					for {
						ds, err := tr.ReceivePartition(ctx, 7, part, parts)
						if err != nil {
							return
						}
						mu.Lock()
						for _, d := range ds {
							if _, h := tr.PartitionOf(d.Envelope.CorrelationID, d.Envelope.ID); int(h%uint32(parts)) != part {
								t.Errorf("part %d of %d got %s (key %s), which hashes to part %d", part, parts, d.Envelope.ID, d.Envelope.CorrelationID, h%uint32(parts))
							}
							seen[d.Envelope.ID]++
						}
						if len(seen) == n {
							cancel()
						}
						mu.Unlock()
						if err := tr.Ack(context.Background(), ds); err != nil {
							t.Errorf("Ack: %v", err)
						}
					}
				})
			}
			wg.Wait()
			if len(seen) != n {
				t.Fatalf("received %d of %d messages", len(seen), n)
			}
			for id, c := range seen {
				if c != 1 {
					t.Errorf("%s received %d times", id, c)
				}
			}
			wantPending(t, tr, 0, 0)
		})
	}
	if _, err := open(t, redisstreams.Config{Namespace: namespace(t), Partitions: 2}).ReceivePartition(context.Background(), 1, 3, 3); err == nil {
		t.Error("ReceivePartition(part 3, parts 3): want an error")
	}
}

// Consumers that hold nothing and were idle long enough are deleted from
// the group; one that holds a delivery never is, and Close removes a
// transport's own consumer when it holds nothing.
func TestIdleConsumersAreForgotten(t *testing.T) {
	ns := namespace(t)
	cfg := redisstreams.Config{Namespace: ns, Partitions: 1, Lease: time.Minute}
	done, holding, janitor := open(t, cfg), open(t, cfg), open(t, cfg)
	publish(t, done, env("a", "k"), env("b", "k"), env("c", "k"))
	ctx := context.Background()
	if err := done.Ack(ctx, receive(t, done, 1, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	receive(t, holding, 1, 5*time.Second)
	c := rawClient(t)
	consumers := func() map[string]int64 {
		t.Helper()
		cs, err := c.XInfoConsumers(ctx, done.Streams()[0], "idem").Result()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int64{}
		for _, x := range cs {
			m[x.Name] = x.Pending
		}
		return m
	}
	if cs := consumers(); len(cs) != 2 {
		t.Fatalf("consumers %v, want the two that received", cs)
	}
	n, err := janitor.ForgetIdle(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	cs := consumers()
	if n != 1 || len(cs) != 1 || cs[holding.Consumer()] != 1 {
		t.Fatalf("deleted %d, left %v; want only %s with its pending delivery", n, cs, holding.Consumer())
	}
	// Receiving creates the consumer again; Close removes it once it holds
	// nothing.
	if err := done.Ack(ctx, receive(t, done, 1, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if cs := consumers(); len(cs) != 2 {
		t.Fatalf("consumers %v, want two", cs)
	}
	_ = done.Close()
	if cs := consumers(); len(cs) != 1 || cs[holding.Consumer()] == 0 {
		t.Fatalf("after Close: consumers %v, want only %s", cs, holding.Consumer())
	}
}

// A busy partition does not starve the others: consecutive Receives start
// at different partitions.
func TestReceiveRotatesPartitions(t *testing.T) {
	ns := namespace(t)
	tr := open(t, redisstreams.Config{Namespace: ns, Partitions: 2, Lease: time.Minute})
	var busy []transport.Envelope
	var quiet transport.Envelope
	for i := 0; len(busy) < 20 || quiet.ID == ""; i++ {
		key := fmt.Sprintf("key-%d", i)
		switch p, _ := tr.PartitionOf(key, ""); {
		case p == 0 && len(busy) < 20:
			busy = append(busy, env(fmt.Sprintf("busy-%d", i), key))
		case p == 1 && quiet.ID == "":
			quiet = env("quiet", key)
		}
	}
	publish(t, tr, busy...)
	publish(t, tr, quiet)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		ds, err := tr.Receive(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Envelope.ID == "quiet" {
				return
			}
		}
	}
	t.Fatal("two Receive(5) calls returned only the busy partition's messages: the quiet one waits behind 20")
}

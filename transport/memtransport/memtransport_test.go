package memtransport_test

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
	"github.com/idemhq/idem/transport/transporttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConformance(t *testing.T) {
	const lease = 50 * time.Millisecond
	features := transporttest.Features{Lease: lease, Fencing: true, NativeDelay: true, Partitioned: true, SizeLimit: true, Pending: true}
	const limit = 1 << 20
	dedup := features
	dedup.PublishDedup = true
	for _, tc := range []struct {
		name     string
		features transporttest.Features
		cfg      memtransport.Config
	}{
		{"FIFO", features, memtransport.Config{Lease: lease, MaxMessageBytes: limit}},
		{"Reorder", features, memtransport.Config{Lease: lease, Reorder: true, Seed: 7, MaxMessageBytes: limit}},
		{"DedupWindow", dedup, memtransport.Config{Lease: lease, MaxMessageBytes: limit, DedupWindow: time.Hour}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			transporttest.Run(t, tc.features, func(t *testing.T) transport.Transport {
				return memtransport.New(&tc.cfg)
			})
		})
	}
}

// bundle is what setup returns: a transport and a context for it.
type bundle struct {
	tr  *memtransport.Transport
	ctx context.Context
}

// setup returns a transport closed at the end of the test. Inside a synctest
// bubble it runs on the bubble's clock.
func setup(t *testing.T, cfg *memtransport.Config) bundle {
	t.Helper()
	tr := memtransport.New(cfg)
	t.Cleanup(func() { _ = tr.Close() })
	return bundle{tr: tr, ctx: t.Context()}
}

func (b bundle) publish(t *testing.T, envs ...transport.Envelope) {
	t.Helper()
	if err := b.tr.Publish(b.ctx, envs); err != nil {
		t.Fatalf("Publish: %v", err)
	}
}

func (b bundle) receive(t *testing.T, max int) []transport.Delivery {
	t.Helper()
	ds, err := b.tr.Receive(b.ctx, max)
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	return ds
}

func (b bundle) ack(t *testing.T, ds ...transport.Delivery) {
	t.Helper()
	if err := b.tr.Ack(b.ctx, ds); err != nil {
		t.Fatalf("Ack: %v", err)
	}
}

// expectNothing fails if a delivery arrives within wait.
func (b bundle) expectNothing(t *testing.T, wait time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, wait)
	defer cancel()
	if ds, err := b.tr.Receive(ctx, 10); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, %v; want no delivery within %v", ids(ds), err, wait)
	}
}

func envs(n int, key func(i int) string) []transport.Envelope {
	out := make([]transport.Envelope, n)
	for i := range out {
		out[i] = transport.Envelope{
			ID:            fmt.Sprintf("m%03d", i),
			Type:          "test.Msg",
			CorrelationID: key(i),
			Body:          []byte(fmt.Sprint(i)),
		}
	}
	return out
}

func ids(ds []transport.Delivery) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Envelope.ID
	}
	return out
}

func TestDuplicateDeliversEachMessageThreeTimes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, &memtransport.Config{Duplicate: 2})
		b.publish(t, envs(5, func(int) string { return "k" })...)

		// The copies are separate entries: three consumers can hold the
		// three copies of the first message at once.
		var first []transport.Delivery
		for range 3 {
			first = append(first, b.receive(t, 1)...)
		}
		if got := ids(first); !slices.Equal(got, []string{"m000", "m000", "m000"}) {
			t.Fatalf("first three deliveries: got %v, want three copies of m000", got)
		}
		if first[0].Token == first[1].Token || first[1].Token == first[2].Token || first[0].Token == first[2].Token {
			t.Fatalf("copies share a token: %q %q %q", first[0].Token, first[1].Token, first[2].Token)
		}
		if st := b.tr.Stats(); st.InFlight != 3 {
			t.Fatalf("got InFlight %d, want 3 copies in flight", st.InFlight)
		}

		all := append(first, b.receive(t, 100)...)
		count := map[string]int{}
		for _, d := range all {
			count[d.Envelope.ID]++
			if d.Attempt != 1 {
				t.Errorf("%s: got Attempt %d, want 1 for every copy", d.Envelope.ID, d.Attempt)
			}
		}
		for i := range 5 {
			if id := fmt.Sprintf("m%03d", i); count[id] != 3 {
				t.Errorf("%s delivered %d times, want 3", id, count[id])
			}
		}
		for _, d := range all {
			b.ack(t, d)
		}
		b.expectNothing(t, time.Hour)

		st := b.tr.Stats()
		want := memtransport.Stats{Published: 5, DuplicatesInjected: 10, Delivered: 15, Acked: 15}
		if st != want {
			t.Errorf("Stats: got %+v, want %+v", st, want)
		}
		if p := b.tr.Unsettled(); p != 0 {
			t.Errorf("Pending: got %d, want 0", p)
		}
	})
}

func TestDuplicateRandom(t *testing.T) {
	b := setup(t, &memtransport.Config{Duplicate: 3, DuplicateRandom: true, Seed: 42})
	const n = 200
	b.publish(t, envs(n, func(i int) string { return fmt.Sprint(i) })...)
	st := b.tr.Stats()
	if st.Ready != n+int(st.DuplicatesInjected) {
		t.Fatalf("got %d ready entries, want %d published + %d copies", st.Ready, n, st.DuplicatesInjected)
	}
	count := map[string]int{}
	for _, d := range b.receive(t, 10*n) {
		count[d.Envelope.ID]++
	}
	hist := map[int]int{}
	for _, c := range count {
		hist[c]++
	}
	if len(count) != n {
		t.Fatalf("got %d distinct messages, want %d", len(count), n)
	}
	for c := range hist {
		if c < 1 || c > 4 {
			t.Errorf("a message was delivered %d times, want 1 to 4", c)
		}
	}
	if len(hist) < 3 {
		t.Errorf("copies per message %v: want a spread of counts from a random 0..3", hist)
	}
}

func TestLoseAckRedeliversAfterLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, &memtransport.Config{LoseAckRate: 1}) // default 30s lease
		b.publish(t, envs(1, func(int) string { return "k" })...)
		start := time.Now()
		d1 := b.receive(t, 1)[0]
		b.ack(t, d1) // reports success, but is dropped

		if st := b.tr.Stats(); st.AcksLost != 1 || st.Acked != 0 || st.InFlight != 1 {
			t.Fatalf("after a lost ack: got %+v, want AcksLost 1, Acked 0, InFlight 1", st)
		}
		d2 := b.receive(t, 1)[0]
		if elapsed := time.Since(start); elapsed != memtransport.DefaultLease {
			t.Errorf("redelivered after %v, want the %v lease", elapsed, memtransport.DefaultLease)
		}
		if d2.Envelope.ID != d1.Envelope.ID || d2.Attempt != 2 {
			t.Errorf("got %s attempt %d, want %s attempt 2", d2.Envelope.ID, d2.Attempt, d1.Envelope.ID)
		}
		if p := b.tr.Unsettled(); p != 1 {
			t.Errorf("Pending: got %d, want 1", p)
		}
	})
}

func TestReorderAcrossKeysKeepsOrderWithinKey(t *testing.T) {
	b := setup(t, &memtransport.Config{Reorder: true, Seed: 1})
	const n, keys = 100, 10
	b.publish(t, envs(n, func(i int) string { return fmt.Sprintf("k%d", i%keys) })...)

	var order []int
	for range n {
		for _, d := range b.receive(t, 1) {
			var i int
			fmt.Sscan(string(d.Envelope.Body), &i)
			order = append(order, i)
			b.ack(t, d)
		}
	}
	if len(order) != n {
		t.Fatalf("got %d deliveries, want %d", len(order), n)
	}
	if slices.IsSorted(order) {
		t.Errorf("delivery order is FIFO, want a reordering across keys: %v", order)
	}
	sorted := slices.Sorted(slices.Values(order))
	for i, v := range sorted {
		if v != i {
			t.Fatalf("delivered messages %v, want each of 0..%d once", sorted, n-1)
		}
	}
	last := map[int]int{}
	for _, i := range order {
		k := i % keys
		if prev, ok := last[k]; ok && prev > i {
			t.Errorf("key k%d: message %d delivered after %d, want publication order within a key", k, i, prev)
		}
		last[k] = i
	}
	if p := b.tr.Unsettled(); p != 0 {
		t.Errorf("Pending: got %d, want 0", p)
	}
}

func TestReorderIsRepeatableWithSeed(t *testing.T) {
	run := func() []string {
		b := setup(t, &memtransport.Config{Reorder: true, Seed: 99, Duplicate: 1, DuplicateRandom: true})
		b.publish(t, envs(50, func(i int) string { return fmt.Sprint(i % 7) })...)
		return ids(b.receive(t, 1000))
	}
	first, second := run(), run()
	if !slices.Equal(first, second) {
		t.Errorf("same seed, same calls: got\n%v\nthen\n%v", first, second)
	}
}

func TestLeaseExpiryWithSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const lease = time.Minute
		b := setup(t, &memtransport.Config{Lease: lease})
		b.publish(t, envs(2, func(i int) string { return "k" })...)

		start := time.Now()
		d1 := b.receive(t, 1)[0]
		other := b.receive(t, 1)[0]
		b.ack(t, other)

		// Nothing is ready: Receive blocks until the lease expires.
		d2 := b.receive(t, 1)[0]
		if elapsed := time.Since(start); elapsed != lease {
			t.Errorf("redelivered after %v, want exactly the %v lease", elapsed, lease)
		}
		if d2.Envelope.ID != d1.Envelope.ID || d2.Attempt != 2 || d2.Token == d1.Token {
			t.Fatalf("got %s attempt %d token %q, want %s attempt 2 with a new token", d2.Envelope.ID, d2.Attempt, d2.Token, d1.Envelope.ID)
		}
		if st := b.tr.Stats(); st.Redelivered != 1 || st.InFlight != 1 {
			t.Errorf("Stats: got %+v, want Redelivered 1, InFlight 1", st)
		}

		// The stale delivery is fenced; the current one settles.
		if err := b.tr.Ack(b.ctx, []transport.Delivery{d1}); !errors.Is(err, transport.ErrLeaseLost) {
			t.Errorf("Ack of expired delivery: got %v, want ErrLeaseLost", err)
		}
		if err := b.tr.Nack(b.ctx, d1, 0); !errors.Is(err, transport.ErrLeaseLost) {
			t.Errorf("Nack of expired delivery: got %v, want ErrLeaseLost", err)
		}
		b.ack(t, d2)
		// After d2 was acked, d1 is still a lost lease, not an ack.
		if err := b.tr.Ack(b.ctx, []transport.Delivery{d1}); !errors.Is(err, transport.ErrLeaseLost) {
			t.Errorf("Ack of expired delivery after the message was acked: got %v, want ErrLeaseLost", err)
		}
		b.expectNothing(t, 10*lease)
	})
}

func TestAckAfterLeaseExpiryBeforeRedelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, &memtransport.Config{Lease: time.Minute})
		b.publish(t, envs(1, func(int) string { return "k" })...)
		d := b.receive(t, 1)[0]
		time.Sleep(2 * time.Minute) // advances the bubble's clock
		if st := b.tr.Stats(); st.Ready != 1 || st.InFlight != 0 {
			t.Fatalf("after lease expiry: got %+v, want Ready 1, InFlight 0", st)
		}
		// Nobody else holds the message, so the late ack still counts.
		b.ack(t, d)
		if p := b.tr.Unsettled(); p != 0 {
			t.Fatalf("Pending after late ack: got %d, want 0", p)
		}
		b.expectNothing(t, time.Hour)
	})
}

func TestNackDelayWithSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, &memtransport.Config{Lease: time.Second})
		b.publish(t, envs(1, func(int) string { return "k" })...)
		d1 := b.receive(t, 1)[0]
		start := time.Now()
		if err := b.tr.Nack(b.ctx, d1, 10*time.Second); err != nil {
			t.Fatalf("Nack: %v", err)
		}
		if st := b.tr.Stats(); st.Delayed != 1 || st.Nacked != 1 {
			t.Fatalf("after Nack: got %+v, want Delayed 1, Nacked 1", st)
		}
		// Settling the nacked delivery again changes nothing.
		b.ack(t, d1)
		d2 := b.receive(t, 1)[0]
		if elapsed := time.Since(start); elapsed != 10*time.Second {
			t.Errorf("redelivered after %v, want the 10s delay", elapsed)
		}
		if d2.Attempt != 2 {
			t.Errorf("got Attempt %d, want 2", d2.Attempt)
		}
		b.ack(t, d2)
		if p := b.tr.Unsettled(); p != 0 {
			t.Errorf("Pending: got %d, want 0", p)
		}
	})
}

func TestRedeliveryKeepsPublicationOrder(t *testing.T) {
	b := setup(t, nil)
	b.publish(t, envs(3, func(int) string { return "k" })...)
	ds := b.receive(t, 3)
	if err := b.tr.Nack(b.ctx, ds[0], 0); err != nil {
		t.Fatalf("Nack: %v", err)
	}
	b.ack(t, ds[1:]...)
	b.publish(t, transport.Envelope{ID: "later", Type: "test.Msg"})
	if got := ids(b.receive(t, 2)); !slices.Equal(got, []string{"m000", "later"}) {
		t.Errorf("got %v, want the nacked m000 before the later message", got)
	}
}

func TestInvalidTokensAndEnvelopes(t *testing.T) {
	b := setup(t, nil)
	for _, tok := range []string{"", "x", "1", "1.0", "99.1", "1.x"} {
		err := b.tr.Ack(b.ctx, []transport.Delivery{{Envelope: transport.Envelope{ID: "m"}, Token: tok}})
		if err == nil || errors.Is(err, transport.ErrLeaseLost) {
			t.Errorf("Ack with token %q: got %v, want an invalid-token error", tok, err)
		}
	}
	if err := b.tr.Publish(b.ctx, []transport.Envelope{{Type: "t"}}); err == nil || !strings.Contains(err.Error(), "missing id") {
		t.Errorf("Publish without ID: got %v, want a missing id error", err)
	}
	err := b.tr.Publish(b.ctx, []transport.Envelope{{ID: "ok", Type: "t"}, {ID: "a"}})
	if err == nil || !strings.Contains(err.Error(), "missing type") {
		t.Errorf("Publish without Type: got %v, want a missing type error", err)
	}
	if p := b.tr.Unsettled(); p != 0 {
		t.Errorf("Pending after a rejected Publish: got %d, want 0 (all or nothing)", p)
	}
}

func TestNewRejectsInvalidConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg   memtransport.Config
		field string
	}{
		{memtransport.Config{Lease: -time.Second}, "Lease"},
		{memtransport.Config{Duplicate: -1}, "Duplicate"},
		{memtransport.Config{LoseAckRate: 1.5}, "LoseAckRate"},
		{memtransport.Config{LoseAckRate: math.NaN()}, "LoseAckRate"},
	} {
		func() {
			defer func() {
				r := recover()
				if msg, _ := r.(string); !strings.Contains(msg, tc.field) {
					t.Errorf("New(%+v): got panic %v, want one naming %s", tc.cfg, r, tc.field)
				}
			}()
			memtransport.New(&tc.cfg)
		}()
	}
}

// TestFaultsUnderConcurrency drives several consumers through duplicates,
// reordering, lost acks and short leases, for the race detector, and checks
// that every message is delivered and eventually settled.
func TestFaultsUnderConcurrency(t *testing.T) {
	const n, consumers, lease = 2000, 8, 20 * time.Millisecond
	b := setup(t, &memtransport.Config{
		Lease: lease, Duplicate: 1, DuplicateRandom: true, Reorder: true, LoseAckRate: 0.1, Seed: 3,
	})
	all := envs(n, func(i int) string { return fmt.Sprint(i % 64) })
	for i := 0; i < n; i += 250 {
		b.publish(t, all[i:i+250]...)
	}

	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
		wg   sync.WaitGroup
	)
	for c := range consumers {
		wg.Go(func() {
			for b.tr.Unsettled() > 0 && ctx.Err() == nil {
				rctx, rcancel := context.WithTimeout(ctx, 2*lease)
				ds, err := b.tr.Receive(rctx, 1+c)
				rcancel()
				if err != nil {
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("Receive: %v", err)
						return
					}
					continue
				}
				mu.Lock()
				for _, d := range ds {
					seen[d.Envelope.ID] = true
				}
				mu.Unlock()
				if c%2 == 0 && len(ds) > 0 {
					if err := b.tr.Nack(ctx, ds[0], 0); err != nil && !errors.Is(err, transport.ErrLeaseLost) {
						t.Errorf("Nack: %v", err)
					}
				}
				if err := b.tr.Ack(ctx, ds); err != nil && !errors.Is(err, transport.ErrLeaseLost) {
					t.Errorf("Ack: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if p := b.tr.Unsettled(); p != 0 {
		t.Fatalf("Pending: got %d, want 0 within the deadline", p)
	}
	if len(seen) != n {
		t.Errorf("saw %d distinct messages, want %d", len(seen), n)
	}
	st := b.tr.Stats()
	if st.InFlight+st.Ready+st.Delayed != 0 || st.Acked != int64(n)+st.DuplicatesInjected {
		t.Errorf("Stats: got %+v, want every entry acked once", st)
	}
	t.Logf("%+v", st)
}

func TestCloseLeaksNoGoroutine(t *testing.T) {
	defer goleak.VerifyNone(t)
	tr := memtransport.New(&memtransport.Config{Lease: time.Hour})
	ctx := t.Context()
	if err := tr.Publish(ctx, envs(2, func(int) string { return "k" })); err != nil {
		t.Fatal(err)
	}
	ds, err := tr.Receive(ctx, 2)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Nack(ctx, ds[0], time.Hour); err != nil {
		t.Fatal(err)
	}
	// Blocked Receivers arm the lease timer; Close must release them and it.
	errs := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := tr.Receive(context.Background(), 1)
			errs <- err
		}()
	}
	if err := tr.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for range 3 {
		if err := <-errs; !errors.Is(err, transport.ErrClosed) {
			t.Errorf("blocked Receive after Close: got %v, want ErrClosed", err)
		}
	}
	if st := tr.Stats(); st.InFlight != 1 || st.Delayed != 1 {
		t.Errorf("Stats after Close: got %+v, want the state at Close", st)
	}
}

func TestSettleNackedDeliveryAfterRedelivery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, &memtransport.Config{Lease: time.Minute})
		b.publish(t, envs(1, func(int) string { return "k" })...)
		d1 := b.receive(t, 1)[0]
		if err := b.tr.Nack(b.ctx, d1, 0); err != nil {
			t.Fatalf("Nack: %v", err)
		}
		d2 := b.receive(t, 1)[0]

		// d1 was settled by its Nack: settling it again is not an error
		// and leaves d2 alone.
		b.ack(t, d1)
		if err := b.tr.Nack(b.ctx, d1, 0); err != nil {
			t.Errorf("second Nack of d1: %v", err)
		}
		if st := b.tr.Stats(); st.InFlight != 1 || st.Acked != 0 {
			t.Fatalf("after settling d1 again: got %+v, want d2 still in flight", st)
		}
		b.ack(t, d2)
		b.ack(t, d1)
		if p := b.tr.Unsettled(); p != 0 {
			t.Errorf("Pending: got %d, want 0", p)
		}
	})
}

// BenchmarkPublishReceiveAck measures one message through publish, receive
// and ack with 4 concurrent consumers and a backlog of b.N messages.
func BenchmarkPublishReceiveAck(b *testing.B) {
	for _, reorder := range []bool{false, true} {
		b.Run(fmt.Sprintf("reorder=%v", reorder), func(b *testing.B) {
			tr := memtransport.New(&memtransport.Config{Reorder: reorder})
			defer tr.Close()
			ctx := context.Background()
			msgs := envs(b.N, func(i int) string { return fmt.Sprint(i % 100) })
			b.ResetTimer()
			for i := 0; i < len(msgs); i += 1000 {
				if err := tr.Publish(ctx, msgs[i:min(i+1000, len(msgs))]); err != nil {
					b.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			for range 4 {
				wg.Go(func() {
					for tr.Unsettled() > 0 {
						rctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
						ds, err := tr.Receive(rctx, 64)
						cancel()
						if err != nil {
							continue
						}
						if err := tr.Ack(ctx, ds); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// Every error memtransport returns starts with its name, as the other
// backends' errors do, so that a log line says which transport failed.
func TestErrorsNameThePackage(t *testing.T) {
	ctx := context.Background()
	tr := memtransport.New(nil)
	ok := transport.Envelope{ID: "m-1", Type: "t.Ping", Body: []byte(`{}`)}
	errs := map[string]error{
		"publish without id":      tr.Publish(ctx, []transport.Envelope{{Type: "t.Ping"}}),
		"publish without type":    tr.Publish(ctx, []transport.Envelope{{ID: "m-0"}}),
		"ack of a foreign token":  tr.Ack(ctx, []transport.Delivery{{Envelope: ok, Token: "not-a-token"}}),
		"nack of a foreign token": tr.Nack(ctx, transport.Delivery{Envelope: ok, Token: "not-a-token"}, 0),
	}
	_, errs["receive partition out of range"] = tr.ReceivePartition(ctx, 1, 3, 2)
	done, cancel := context.WithCancel(ctx)
	cancel()
	errs["publish on a done context"] = tr.Publish(done, []transport.Envelope{ok})
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	errs["publish after close"] = tr.Publish(ctx, []transport.Envelope{ok})
	_, errs["receive after close"] = tr.Receive(ctx, 1)
	errs["close twice"] = tr.Close()
	_, _, errs["pending after close"] = tr.Pending(ctx)
	for what, err := range errs {
		if err == nil || !strings.HasPrefix(err.Error(), "memtransport: ") {
			t.Errorf("%s: got error %v, want one starting with \"memtransport: \"", what, err)
		}
	}
}

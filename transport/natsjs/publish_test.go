package natsjs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
	"github.com/idemhq/idem/transport/natsjs/natsembed"
)

func envs(prefix string, n int) []transport.Envelope {
	out := make([]transport.Envelope, n)
	for i := range out {
		out[i] = transport.Envelope{ID: fmt.Sprintf("%s-%d", prefix, i), Type: "A", CorrelationID: fmt.Sprintf("k-%d", i%7), SentAt: time.Now(), Body: []byte(`{}`)}
	}
	return out
}

// receiveAll receives until want distinct IDs arrived, acking them, and
// returns them in the order received; it fails on a copy of one.
func receiveAll(t *testing.T, tr *natsjs.Transport, want int) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	seen := map[string]bool{}
	var order []string
	for len(order) < want {
		ds, err := tr.Receive(ctx, want)
		if err != nil {
			t.Fatalf("received %d of %d: %v", len(order), want, err)
		}
		for _, d := range ds {
			if seen[d.Envelope.ID] {
				t.Errorf("%s delivered twice", d.Envelope.ID)
			}
			seen[d.Envelope.ID] = true
			order = append(order, d.Envelope.ID)
		}
		if err := tr.Ack(ctx, ds); err != nil {
			t.Fatal(err)
		}
	}
	return order
}

// checkKeyOrder fails unless every key's envelopes of each published
// call were received in the order of the call.
func checkKeyOrder(t *testing.T, received []string, calls ...[]transport.Envelope) {
	t.Helper()
	pos := map[string]int{}
	for i, id := range received {
		pos[id] = i
	}
	for _, call := range calls {
		last := map[string]int{}
		for _, e := range call {
			p, ok := pos[e.ID]
			if !ok {
				t.Errorf("%s never received", e.ID)
				continue
			}
			if q, ok := last[e.CorrelationID]; ok && p < q {
				t.Errorf("%s (key %s) received before an envelope published ahead of it", e.ID, e.CorrelationID)
			}
			last[e.CorrelationID] = p
		}
	}
}

// Publish stores a call of at least AtomicBatchMin envelopes as atomic
// batches of up to AtomicBatchMax, in order; smaller calls, and a tail
// smaller than AtomicBatchMin, go one message at a time.
func TestPublishSendsAtomicBatches(t *testing.T) {
	tr := open(t, natsjs.Config{Partitions: 4})
	ctx := t.Context()
	calls := []struct {
		envs        []transport.Envelope
		wantBatches int64
	}{
		{envs("few", natsjs.AtomicBatchMin-1), 0},
		{envs("some", natsjs.AtomicBatchMin+2), 1},
		{envs("many", natsjs.AtomicBatchMax+natsjs.AtomicBatchMin), 3},
		{envs("tail", natsjs.AtomicBatchMax+1), 4},
	}
	var all [][]transport.Envelope
	total := 0
	for _, c := range calls {
		if err := tr.Publish(ctx, c.envs); err != nil {
			t.Fatal(err)
		}
		if got := tr.Batches(); got != c.wantBatches {
			t.Fatalf("after publishing %s (%d envelopes): %d atomic batches in all, want %d", c.envs[0].ID, len(c.envs), got, c.wantBatches)
		}
		all = append(all, c.envs)
		total += len(c.envs)
	}
	checkKeyOrder(t, receiveAll(t, tr, total), all...)
}

// A batch that repeats an ID the stream has seen (a relay's retry after a
// lost answer) or repeats one of its own is refused whole by the server;
// Publish then sends its messages one by one, in order, and the duplicate
// window drops the copies: every message is stored once.
func TestPublishBatchWithDuplicatesStoresEachOnce(t *testing.T) {
	tr := open(t, natsjs.Config{Partitions: 4})
	ctx := t.Context()
	first := envs("dup", natsjs.AtomicBatchMin+1)
	if err := tr.Publish(ctx, first[:1]); err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, first); err != nil {
		t.Fatalf("batch with an ID already stored: %v", err)
	}
	twice := envs("twice", natsjs.AtomicBatchMin/2)
	if err := tr.Publish(ctx, append(twice, twice...)); err != nil {
		t.Fatalf("batch repeating its own IDs: %v", err)
	}
	if got := tr.Batches(); got != 0 {
		t.Errorf("%d batches committed, want 0: both held duplicates", got)
	}
	want := len(first) + len(twice)
	if n := streamMsgs(t, tr); n != uint64(want) {
		t.Fatalf("%d messages in the stream, want %d", n, want)
	}
	checkKeyOrder(t, receiveAll(t, tr, want), first, twice)
}

// Open does not change a stream it did not create: one without
// allow_atomic (made by an earlier version, or by an operator for a
// cluster with older servers) keeps its settings, and Publish sends one
// message at a time.
func TestOpenLeavesAnExistingStreamAlone(t *testing.T) {
	srv := sharedServer(t)
	ctx := t.Context()
	stream := randName("OLD_")
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"},
		Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage, Duplicates: 3 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	tr := open(t, natsjs.Config{Stream: stream, Partitions: 4})
	sent := envs("old", natsjs.AtomicBatchMin)
	if err := tr.Publish(ctx, sent); err != nil {
		t.Fatal(err)
	}
	if got := tr.Batches(); got != 0 {
		t.Errorf("%d atomic batches on a stream without allow_atomic, want 0", got)
	}
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; cfg.AllowAtomicPublish || cfg.Duplicates != 3*time.Minute {
		t.Errorf("stream after Open: allow_atomic %v, duplicate window %v; want false and 3m (unchanged)", cfg.AllowAtomicPublish, cfg.Duplicates)
	}
	checkKeyOrder(t, receiveAll(t, tr, len(sent)), sent)
}

// An operator who turns allow_atomic off on a running stream loses
// nothing: the refused batch goes out one message at a time, and so does
// every later Publish.
func TestPublishAfterAtomicTurnedOff(t *testing.T) {
	srv := sharedServer(t)
	ctx := t.Context()
	stream := randName("OFF_")
	tr := open(t, natsjs.Config{Stream: stream, Partitions: 4})
	on, off, later := envs("on", natsjs.AtomicBatchMin), envs("off", natsjs.AtomicBatchMin), envs("later", natsjs.AtomicBatchMin)
	if err := tr.Publish(ctx, on); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.Stream(ctx, stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.AllowAtomicPublish = false
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	for _, call := range [][]transport.Envelope{off, later} {
		if err := tr.Publish(ctx, call); err != nil {
			t.Fatal(err)
		}
	}
	if got := tr.Batches(); got != 1 {
		t.Errorf("%d atomic batches, want 1 (before it was turned off)", got)
	}
	checkKeyOrder(t, receiveAll(t, tr, 3*natsjs.AtomicBatchMin), on, off, later)
}

// Messages that fit in max_payload only without the batch headers (a few
// dozen bytes) are still published: one at a time.
func TestPublishNearMaxPayloadFallsBackToSingleMessages(t *testing.T) {
	const maxPayload = 64 << 10
	srv, err := natsembed.Start(t.Context(), t.TempDir(), &natsembed.Config{MaxPayload: maxPayload})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	tr, err := natsjs.Open(t.Context(), srv.URL(), &natsjs.Config{Stream: randName("NEAR_"), Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	near := func(id string) transport.Envelope {
		// Pad a header until the message is 10 bytes under max_payload.
		env := engineLike(id, bytes.Repeat([]byte("b"), tr.MaxMessageBytes()))
		env.Headers["x-pad"] = ""
		size, err := tr.WireSize(env)
		if err != nil {
			t.Fatal(err)
		}
		env.Headers["x-pad"] = strings.Repeat("p", maxPayload-10-size)
		if size, err = tr.WireSize(env); err != nil || size != maxPayload-10 {
			t.Fatalf("padded message: %d bytes (%v), want %d", size, err, maxPayload-10)
		}
		return env
	}
	var sent []transport.Envelope
	for i := range natsjs.AtomicBatchMin {
		sent = append(sent, near(fmt.Sprintf("n-%d", i)))
	}
	if err := tr.Publish(t.Context(), sent); err != nil {
		t.Fatalf("Publish of messages 10 bytes under max_payload: %v", err)
	}
	if got := tr.Batches(); got != 0 {
		t.Errorf("%d atomic batches, want 0: the batch headers do not fit", got)
	}
	checkKeyOrder(t, receiveAll(t, tr, len(sent)), sent)
}

// A server restarted with a smaller max_payload refuses a message of the
// batch; Publish then reports ErrTooLarge as for single messages, which
// the engine's relay needs to dead-letter that message and send the rest.
func TestBatchWithMessageAboveNewMaxPayloadReportsErrTooLarge(t *testing.T) {
	dir := t.TempDir()
	srv, err := natsembed.Start(t.Context(), dir, &natsembed.Config{MaxPayload: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	port := srv.Port()
	tr, err := natsjs.Open(t.Context(), srv.URL(), &natsjs.Config{Stream: randName("SHRINK_"), Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	srv.Shutdown()
	if srv, err = natsembed.Start(t.Context(), dir, &natsembed.Config{Port: port, MaxPayload: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	for { // wait until the transport has reconnected
		if _, _, err := tr.Pending(ctx); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatalf("no reconnect: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition, with the deadline above
	}
	batch := envs("shrink", natsjs.AtomicBatchMin)
	batch[3].Body = bytes.Repeat([]byte("x"), 200<<10)
	if err := tr.Publish(ctx, batch); !errors.Is(err, natsjs.ErrTooLarge) {
		t.Fatalf("Publish of a batch with a message above the new max_payload: got %v, want ErrTooLarge", err)
	}
}

// A batch whose commit was sent when the connection broke fails at once
// with nats.ErrDisconnected, as an asynchronous publish does, rather than
// waiting for an answer that cannot come: the engine's settle publishes
// after commit and must not hold up a Stop (the relay sends again). A
// proxy between client and server drops the server's answers from before
// the commit is sent, and cuts the connection once it is.
func TestBatchCommitFailsWhenTheConnectionBreaks(t *testing.T) {
	srv := sharedServer(t)
	px := newCutProxy(t, fmt.Sprintf("127.0.0.1:%d", srv.Port()))
	stream := randName("CUT_")
	tr, err := natsjs.Open(t.Context(), "nats://"+px.addr(), &natsjs.Config{Stream: stream, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = tr.Close()
		deleteStream(t, srv.URL(), stream)
	}()
	natsjs.SetCommitHook(func(sent bool) {
		if sent {
			px.cut()
		} else {
			px.mute()
		}
	})
	defer natsjs.SetCommitHook(nil)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	err = tr.Publish(ctx, envs("cut", natsjs.AtomicBatchMin))
	if !errors.Is(err, nats.ErrDisconnected) {
		t.Fatalf("Publish whose connection broke after the commit was sent: got %v, want an error wrapping nats.ErrDisconnected", err)
	}
}

// cutProxy forwards TCP connections to a server; mute drops what the
// server sends from then on, and cut closes the proxy.
type cutProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	muted bool
	conns []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln}
	t.Cleanup(p.cut)
	go p.serve(target)
	return p
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) serve(target string) {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", target)
		if err != nil {
			_ = c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, s)
		p.mu.Unlock()
		go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
		go p.down(c, s)
	}
}

// down copies what the server sends to the client until muted.
func (p *cutProxy) down(c, s net.Conn) {
	defer c.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := s.Read(buf)
		p.mu.Lock()
		muted := p.muted
		p.mu.Unlock()
		if n > 0 && !muted {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *cutProxy) mute() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.muted = true
}

func (p *cutProxy) cut() {
	_ = p.ln.Close() // a reconnect is refused at once
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
)

// stallWindow is the asynchronous publishes a stall test lets await
// their answer at once.
const stallWindow = 2

// openSlow opens a Transport on a fresh stream of the shared server
// through px, whose answers then come late, with a window of stallWindow
// asynchronous publishes.
func openSlow(t *testing.T, px *slowProxy, cfg natsjs.Config) *natsjs.Transport {
	t.Helper()
	cfg.Stream = randName("STALL_")
	tr, err := natsjs.Open(t.Context(), "nats://"+px.addr(), &cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = tr.Close()
		deleteStream(t, sharedServer(t).URL(), cfg.Stream)
	})
	if err := tr.LimitAsyncPending(stallWindow); err != nil {
		t.Fatal(err)
	}
	return tr
}

// A Publish that finds the JetStream context's window of unanswered
// asynchronous publishes full waits for answers, as backpressure, instead
// of failing with jetstream.ErrTooManyStalledMsgs: the server answers
// half a second late, longer than the library's stall wait (200 ms),
// through a window of two. One call has more messages than the window
// (it waits for its own answers), calls of one message share the window
// (they wait for other calls' answers), and a batch's commit waits too.
// Every message is stored once, each call's in its order.
func TestPublishWaitsWhileTheWindowIsFull(t *testing.T) {
	px := newSlowProxy(t, fmt.Sprintf("127.0.0.1:%d", sharedServer(t).Port()))
	tr := openSlow(t, px, natsjs.Config{Partitions: 2})
	px.setDelay(500 * time.Millisecond)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	calls := [][]transport.Envelope{envs("long", natsjs.AtomicBatchMin-1), envs("batch", natsjs.AtomicBatchMin)}
	for i := range 6 {
		calls = append(calls, envs(fmt.Sprintf("one%d", i), 1))
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, c := range calls {
		wg.Go(func() { errs[i] = tr.Publish(ctx, c) })
	}
	wg.Wait()
	total := 0
	for i, err := range errs {
		if err != nil {
			t.Errorf("Publish of %s (%d envelopes) through a full window: %v", calls[i][0].ID, len(calls[i]), err)
		}
		total += len(calls[i])
	}
	if t.Failed() {
		return
	}
	if tr.Stalls() == 0 {
		t.Fatal("no publish found the window full: the test did not test the stall")
	}
	px.setDelay(0)
	if got := streamMsgs(t, tr); got != uint64(total) {
		t.Errorf("stream stores %d messages, want %d", got, total)
	}
	checkKeyOrder(t, receiveAll(t, tr, total), calls...)
}

// A Publish waiting for room in the window returns ctx's error when ctx
// ends while it waits for an answer of its own, and transport.ErrClosed
// when the Transport is closed while it waits for another call's. The
// server's answers never come.
func TestPublishWaitingForTheWindowEndsWithCtxOrClose(t *testing.T) {
	px := newSlowProxy(t, fmt.Sprintf("127.0.0.1:%d", sharedServer(t).Port()))
	tr := openSlow(t, px, natsjs.Config{})
	px.setDelay(time.Hour)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	own := publishAsync(ctx, tr, envs("own", stallWindow+1))
	waitAsyncPending(t, tr, stallWindow)
	other := publishAsync(t.Context(), tr, envs("other", 1))
	cancel()
	if err := <-own; !errors.Is(err, context.Canceled) {
		t.Errorf("Publish waiting for its own answers when its ctx ended: got %v, want context.Canceled", err)
	}
	// other met the full window once it counts a stall after own's
	// last: the library's stall wait ended and other waits in Publish.
	waitStalls(t, tr, tr.Stalls()+1)
	_ = tr.Close()
	if err := <-other; !errors.Is(err, transport.ErrClosed) {
		t.Errorf("Publish waiting for another call's answers when the Transport closed: got %v, want transport.ErrClosed", err)
	}
}

// publishAsync runs tr.Publish(ctx, envs) and delivers its error.
func publishAsync(ctx context.Context, tr *natsjs.Transport, envs []transport.Envelope) <-chan error {
	done := make(chan error, 1)
	go func() { done <- tr.Publish(ctx, envs) }()
	return done
}

// waitStalls polls until tr counts at least n stalls, failing at a
// deadline.
func waitStalls(t *testing.T, tr *natsjs.Transport, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for tr.Stalls() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d stalls, want at least %d", tr.Stalls(), n)
		}
		time.Sleep(5 * time.Millisecond) // polling a count, with a deadline
	}
}

// waitAsyncPending polls until tr has n asynchronous publishes awaiting
// their answer, failing at a deadline.
func waitAsyncPending(t *testing.T, tr *natsjs.Transport, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for tr.AsyncPending() != n {
		if time.Now().After(deadline) {
			t.Fatalf("%d asynchronous publishes await their answer, want %d", tr.AsyncPending(), n)
		}
		time.Sleep(5 * time.Millisecond) // polling a count, with a deadline
	}
}

// slowProxy forwards TCP connections to a server and hands what the
// server sends to the client a set delay after it arrived, in order: a
// slow server, as a loaded machine makes it.
type slowProxy struct {
	ln    net.Listener
	delay atomic.Int64 // nanoseconds
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	conns []net.Conn
}

func newSlowProxy(t *testing.T, target string) *slowProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &slowProxy{ln: ln, done: make(chan struct{})}
	t.Cleanup(p.close)
	go p.serve(target)
	return p
}

func (p *slowProxy) addr() string { return p.ln.Addr().String() }

// setDelay delays what the server sends from now on by d.
func (p *slowProxy) setDelay(d time.Duration) { p.delay.Store(int64(d)) }

func (p *slowProxy) serve(target string) {
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
		chunks := make(chan chunk, 1024)
		go p.read(s, chunks)
		go p.write(c, chunks)
	}
}

// chunk is what one read from the server brought, and when to pass it on.
type chunk struct {
	data []byte
	due  time.Time
}

func (p *slowProxy) read(s net.Conn, chunks chan<- chunk) {
	defer close(chunks)
	for {
		buf := make([]byte, 32<<10)
		n, err := s.Read(buf)
		if n > 0 {
			chunks <- chunk{buf[:n], time.Now().Add(time.Duration(p.delay.Load()))}
		}
		if err != nil {
			return
		}
	}
}

func (p *slowProxy) write(c net.Conn, chunks <-chan chunk) {
	defer c.Close()
	for ch := range chunks {
		timer := time.NewTimer(time.Until(ch.due))
		select {
		case <-timer.C: // the server's latency, not a synchronisation
		case <-p.done:
			timer.Stop()
			return
		}
		if _, err := c.Write(ch.data); err != nil {
			return
		}
	}
}

func (p *slowProxy) close() {
	p.once.Do(func() { close(p.done) })
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
}

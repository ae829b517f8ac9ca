package idem_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// errRefused is what the failing store and transport answer.
var errRefused = errors.New("connection refused")

// calls records when a failing operation was called; the call numbered
// okAt (1-based) succeeds.
type calls struct {
	mu   sync.Mutex
	at   []time.Time
	okAt int
}

// call records a call and reports whether it fails.
func (c *calls) call() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.at = append(c.at, time.Now())
	return len(c.at) != c.okAt
}

func (c *calls) times() []time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]time.Time(nil), c.at...)
}

// failingReceive is a transport whose Receive fails but for one call.
type failingReceive struct {
	transport.Transport
	calls
}

func (f *failingReceive) Receive(context.Context, int) ([]transport.Delivery, error) {
	if f.call() {
		return nil, errRefused
	}
	return nil, nil
}

// failingClaims is a store whose ClaimTimers and ClaimOutbox fail but for
// one call each.
type failingClaims struct {
	*memstore.Store
	timers, outbox calls
}

func (f *failingClaims) ClaimTimers(ctx context.Context, p *store.ClaimParams) ([]store.Timer, error) {
	if f.timers.call() {
		return nil, errRefused
	}
	return f.Store.ClaimTimers(ctx, p)
}

func (f *failingClaims) ClaimOutbox(ctx context.Context, p *store.ClaimParams) ([]store.OutboxMessage, error) {
	if f.outbox.call() {
		return nil, errRefused
	}
	return f.Store.ClaimOutbox(ctx, p)
}

// failureLog counts the log records whose message starts with a prefix.
type failureLog struct {
	mu      sync.Mutex
	records []slog.Record
}

func (l *failureLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *failureLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, r)
	return nil
}
func (l *failureLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *failureLog) WithGroup(string) slog.Handler      { return l }

// lines returns the messages of the records starting with prefix, and
// whether one of them carries a count of repeats.
func (l *failureLog) lines(prefix string) (n int, counted bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range l.records {
		if !strings.HasPrefix(r.Message, prefix) {
			continue
		}
		n++
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "repeats" && a.Value.Int64() > 0 {
				counted = true
			}
			return true
		})
	}
	return n, counted
}

// checkBackoff checks the pauses between the failing calls at: each
// failure in a row pauses at least twice as long as the one two before
// (exponential, whatever the jitter), up to the cap (10 s, jittered down
// to 5 s); the call after the success at okAt pauses the least again.
func checkBackoff(t *testing.T, what string, at []time.Time, okAt int, interval time.Duration) {
	t.Helper()
	if len(at) <= okAt+1 {
		t.Fatalf("%s: %d calls, want more than %d", what, len(at), okAt+1)
	}
	gap := func(i int) time.Duration { return at[i+1].Sub(at[i]) - interval }
	// A capped pause is 5-10 s (half jitter), and gap takes a whole
	// interval off each, though the ticker may have added less.
	capped := 5*time.Second - interval
	for i := 0; i+2 < okAt-1; i++ {
		if g, g2 := gap(i), gap(i+2); g2 < capped && g2 < 2*g {
			t.Fatalf("%s: pause after failure %d is %v, after failure %d %v: want it at least doubled", what, i+3, g2, i+1, g)
		}
	}
	if g := gap(okAt - 3); g < capped {
		t.Errorf("%s: pause after failure %d is %v, want the cap (5-10 s)", what, okAt-2, g)
	}
	if g := gap(okAt); g > 5*time.Millisecond {
		t.Errorf("%s: pause after the first failure following a success is %v, want at most RetryBase (5ms)", what, g)
	}
}

// A receive that keeps failing is retried after pauses that grow, up to a
// cap, and start over after a success; and its error is logged once with
// a count, not once per try.
func TestReceiveFailuresBackOffAndLogOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		logs := &failureLog{}
		mem := memtransport.New(nil)
		defer mem.Close()
		st := memstore.New(nil)
		defer st.Close()
		tr := &failingReceive{Transport: mem, calls: calls{okAt: 40}}
		e, err := idem.NewEngine(st, tr, &idem.Config{Logger: slog.New(logs), RetryBase: 5 * time.Millisecond, Consumers: 1,
			TimerInterval: time.Hour, RelayInterval: time.Hour, SweepInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(newCounter(nil)); err != nil {
			t.Fatal(err)
		}
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Minute) // the bubble's clock: no real time passes
		if err := e.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		at := tr.times()
		checkBackoff(t, "receive", at, 40, 0)
		// A fixed 5 ms pause would have tried 120,000 times.
		if len(at) > 200 {
			t.Errorf("%d receives in 10 minutes, want at most 200", len(at))
		}
		n, counted := logs.lines("receive failed")
		if n > 20 || !counted {
			t.Errorf("%d log lines for %d failed receives (a count of repeats: %v), want at most 20 with a count", n, len(at)-1, counted)
		}
	})
}

// The timers and the relay back off the same way when their store keeps
// failing.
func TestTimerAndRelayFailuresBackOffAndLogOnce(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		logs := &failureLog{}
		mem := memtransport.New(nil)
		defer mem.Close()
		st := &failingClaims{Store: memstore.New(nil), timers: calls{okAt: 40}, outbox: calls{okAt: 40}}
		defer st.Close()
		interval := 10 * time.Millisecond
		e, err := idem.NewEngine(st, mem, &idem.Config{Logger: slog.New(logs), RetryBase: 5 * time.Millisecond, Consumers: 1,
			TimerInterval: interval, RelayInterval: interval, SweepInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(newCounter(nil)); err != nil {
			t.Fatal(err)
		}
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Minute)
		if err := e.Stop(context.Background()); err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			what, prefix string
			at           []time.Time
		}{{"timers", "fire timers", st.timers.times()}, {"relay", "relay outbox", st.outbox.times()}} {
			// The ticker adds up to one interval to each pause.
			checkBackoff(t, c.what, c.at, 40, interval)
			if len(c.at) > 200 {
				t.Errorf("%s: %d claims in 10 minutes, want at most 200", c.what, len(c.at))
			}
			n, counted := logs.lines(c.prefix)
			if n > 20 || !counted {
				t.Errorf("%s: %d log lines for %d failed claims (a count of repeats: %v), want at most 20 with a count", c.what, n, len(c.at)-1, counted)
			}
		}
	})
}

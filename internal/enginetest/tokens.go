package enginetest

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// PlaceOrder starts and finishes an order saga, which sends Ship.
type PlaceOrder struct {
	ID string `json:"id"`
}

// Ship is the command the order saga sends; a plain handler consumes it.
type Ship struct {
	ID string `json:"id"`
}

// orderMachine finishes on PlaceOrder, sending Ship: its instance and inbox
// record are swept after Config.Retention.
func orderMachine() *saga.Machine[struct{}] {
	m := saga.New[struct{}]("order")
	done := m.Final("Done")
	place := saga.NewEvent[PlaceOrder](m, func(p PlaceOrder) string { return p.ID })
	m.Initially(saga.When(place).Then(func(c *saga.Context[struct{}], p PlaceOrder) error {
		c.Send(Ship(p))
		return nil
	}).TransitionTo(done))
	return m
}

// fakeClock is a clock the test moves forward.
type fakeClock struct{ ns atomic.Int64 }

func (c *fakeClock) now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) advance(d time.Duration) { c.ns.Add(int64(d)) }

// LateDuplicate checks the token inbox against the retention inbox: a saga
// sends a command, the command's consumer applies it, the sweeper deletes
// the inbox records once Config.Retention has passed, and then the
// transport delivers the command again. Under DedupToken the copy is
// recognised (its token was claimed) and the consumer does not run again;
// under DedupRetention it runs a second time. newQueue returns a fresh
// store that is its own queue and keeps tokens.
func LateDuplicate(t *testing.T, newQueue func(t *testing.T) store.Queue) {
	for _, mode := range []idem.Dedup{idem.DedupToken, idem.DedupRetention} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			lateDuplicate(t, newQueue(t), mode)
		})
	}
}

func lateDuplicate(t *testing.T, q store.Queue, mode idem.Dedup) {
	ctx := t.Context()
	clk := &fakeClock{}
	clk.ns.Store(time.Now().UnixNano())
	e, err := idem.NewEngine(q, q, &idem.Config{
		Dedup: mode, Clock: clk.now, Retention: time.Hour, SweepInterval: time.Hour,
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(orderMachine()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var shipped []idem.Envelope
	if err := e.Handle(saga.MessageType(Ship{}), func(_ context.Context, env idem.Envelope) error {
		mu.Lock()
		shipped = append(shipped, env)
		mu.Unlock()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	runs := func() int { mu.Lock(); defer mu.Unlock(); return len(shipped) }
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.WithoutCancel(ctx)) })

	place, err := e.NewEnvelope("place-1", PlaceOrder{ID: "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Publish(ctx, place); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 10*time.Second, "shipped once", func() (bool, error) { return e.Stats().Applied == 2, nil })
	mu.Lock()
	ship := shipped[0]
	mu.Unlock()
	if got, want := ship.Headers[transport.HeaderToken] == "1", mode == idem.DedupToken; got != want {
		t.Fatalf("emitted Ship carries header %s: %v, want %v under %s", transport.HeaderToken, got, want, mode)
	}

	clk.advance(2 * time.Hour)
	swept, err := e.Sweep(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if swept.Instances != 1 || swept.Inbox < 1 {
		t.Fatalf("sweep after the retention: %+v, want the order saga and the handler's inbox record deleted", swept)
	}

	// The transport delivers the command again, after the sweep.
	if err := q.Publish(ctx, []transport.Envelope{ship}); err != nil {
		t.Fatal(err)
	}
	WaitFor(t, 10*time.Second, "late copy processed", func() (bool, error) {
		s := e.Stats()
		return s.Applied+s.Duplicates == 3, nil
	})
	s := e.Stats()
	switch mode {
	case idem.DedupToken:
		if s.Duplicates != 1 || runs() != 1 {
			t.Fatalf("token inbox: late copy gave %d duplicates and %d handler runs, want 1 duplicate and 1 run", s.Duplicates, runs())
		}
		n, err := q.(store.TokenStore).CountTokens(ctx)
		if err != nil || n != 0 {
			t.Fatalf("tokens left: %d (%v), want 0: the claim deletes the token", n, err)
		}
	case idem.DedupRetention:
		if s.Duplicates != 0 || runs() != 2 {
			t.Fatalf("retention inbox: late copy gave %d duplicates and %d handler runs, want 0 and 2 (the record was swept)", s.Duplicates, runs())
		}
	}
}

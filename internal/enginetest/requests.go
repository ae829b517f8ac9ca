package enginetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// The request scenario: an orders saga asks a bank saga, run by another
// engine on the same store, to authorize a payment (saga.Request), and
// reacts to the response, the timeout or the fault.

// OrdersType and BankType are the scenario's saga types.
const (
	OrdersType = "orders"
	BankType   = "bank"
)

// Order is the orders saga's state: Result records which outcome arrived.
type Order struct {
	Result string `json:"result,omitempty"`
}

// Place starts an order; Retry sends its authorization again.
type Place struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

// Retry supersedes the pending authorization with a new one.
type Retry struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

// Authorize is the request. A negative amount is malformed (the bank
// dead-letters it at decode), 0 fails the bank's handler permanently, 100
// and more the bank records without answering, anything else it answers.
type Authorize struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

// Validate refuses negative amounts.
func (a Authorize) Validate() error {
	if a.Amount < 0 {
		return errors.New("negative amount")
	}
	return nil
}

// Authorized is the response.
type Authorized struct {
	OrderID string `json:"order_id"`
}

// OrdersMachine builds the orders saga and returns its request.
func OrdersMachine() (*saga.Machine[Order], *saga.Request[Order, Authorize, Authorized]) {
	m := saga.New[Order](OrdersType)
	waiting, timedOut := m.State("Waiting"), m.State("TimedOut")
	done, failed := m.Final("Done"), m.Final("Failed")
	place := saga.NewEvent(m, func(p Place) string { return p.OrderID })
	retry := saga.NewEvent(m, func(r Retry) string { return r.OrderID })
	auth := saga.NewRequest[Authorize](m, "authorize", func(a Authorized) string { return a.OrderID })
	m.Initially(saga.When(place).Then(func(c *saga.Context[Order], p Place) error {
		auth.Send(c, Authorize(p), time.Minute)
		return nil
	}).TransitionTo(waiting))
	result := func(r string) func(*saga.Context[Order], Authorized) error {
		return func(c *saga.Context[Order], _ Authorized) error { c.Data.Result = r; return nil }
	}
	m.During(waiting,
		saga.When(retry).Then(func(c *saga.Context[Order], r Retry) error {
			auth.Send(c, Authorize(r), time.Minute)
			return nil
		}),
		saga.When(auth.Completed).Then(result("authorized")).TransitionTo(done),
		saga.When(auth.TimeoutExpired).Then(func(c *saga.Context[Order], _ saga.Timeout[Authorize]) error {
			c.Data.Result = "timeout"
			return nil
		}).TransitionTo(timedOut),
		saga.When(auth.Faulted).Then(func(c *saga.Context[Order], f saga.Fault[Authorize]) error {
			c.Data.Result = "fault:" + f.Reason
			return nil
		}).TransitionTo(failed),
	)
	// Were a late response or fault not ignored as stale, these would
	// record it.
	m.During(timedOut,
		saga.Ignore(retry),
		saga.When(auth.Completed).Then(result("late response")).TransitionTo(done),
		saga.Ignore(auth.TimeoutExpired),
		saga.When(auth.Faulted).Then(func(c *saga.Context[Order], _ saga.Fault[Authorize]) error {
			c.Data.Result = "late fault"
			return nil
		}).TransitionTo(failed),
	)
	return m, auth
}

// BankMachine builds the bank saga, which consumes Authorize.
func BankMachine() *saga.Machine[struct{}] {
	m := saga.New[struct{}](BankType)
	done := m.Final("Done")
	authorize := saga.NewEvent(m, func(a Authorize) string { return a.OrderID })
	m.Initially(saga.When(authorize).Then(func(c *saga.Context[struct{}], a Authorize) error {
		switch {
		case a.Amount == 0:
			return idem.Permanent(errors.New("no amount"))
		case a.Amount < 100:
			c.Publish(Authorized{OrderID: a.OrderID})
		}
		return nil
	}).TransitionTo(done))
	return m
}

// Router is a transport that publishes each message type to the memory
// transport of the engine that consumes it, and receives from its own.
type Router struct {
	*memtransport.Transport
	routes map[string]*memtransport.Transport
	def    *memtransport.Transport

	mu   sync.Mutex
	sent []transport.Envelope
}

// Publish routes msgs by type and records them.
func (r *Router) Publish(ctx context.Context, msgs []transport.Envelope) error {
	r.mu.Lock()
	r.sent = append(r.sent, msgs...)
	r.mu.Unlock()
	for _, m := range msgs {
		to := r.routes[m.Type]
		if to == nil {
			to = r.def
		}
		if err := to.Publish(ctx, []transport.Envelope{m}); err != nil {
			return err
		}
	}
	return nil
}

// Sent returns the distinct messages of type typ published so far, in order.
func (r *Router) Sent(typ string) []transport.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []transport.Envelope
	for _, m := range r.sent {
		if m.Type == typ && !slices.ContainsFunc(out, func(o transport.Envelope) bool { return o.ID == m.ID }) {
			out = append(out, m)
		}
	}
	return out
}

// Close does nothing: the scenario closes the memory transports.
func (r *Router) Close() error { return nil }

// RequestBundle is the scenario's running pair of engines on one store.
type RequestBundle struct {
	t            *testing.T
	St           store.Store
	Orders, Bank *idem.Engine
	ToOrders     *Router
	ToBank       *Router
	mu           sync.Mutex
	now          time.Time
}

// NewRequestBundle starts the orders engine and the bank engine on st,
// each with its own memory transport, and a shared manual clock.
func NewRequestBundle(t *testing.T, st store.Store) *RequestBundle {
	t.Helper()
	b := &RequestBundle{t: t, St: st, now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	mOrders, mBank := memtransport.New(nil), memtransport.New(nil)
	routes := map[string]*memtransport.Transport{saga.MessageType(Authorize{}): mBank}
	b.ToOrders = &Router{Transport: mOrders, routes: routes, def: mOrders}
	b.ToBank = &Router{Transport: mBank, routes: routes, def: mOrders}
	cfg := func() *idem.Config {
		return &idem.Config{
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Clock: b.clock,
			RetryBase: time.Millisecond, RetryMax: 5 * time.Millisecond,
			TimerInterval: time.Hour, SweepInterval: time.Hour, RelayInterval: time.Hour,
		}
	}
	orders, _ := OrdersMachine()
	b.Orders = newRegistered(t, st, b.ToOrders, cfg(), orders)
	b.Bank = newRegistered(t, st, b.ToBank, cfg(), BankMachine())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, e := range []*idem.Engine{b.Orders, b.Bank} {
			if err := e.Stop(ctx); err != nil {
				t.Errorf("Stop: %v", err)
			}
		}
		_ = mOrders.Close()
		_ = mBank.Close()
	})
	return b
}

func newRegistered(t *testing.T, st store.Store, tr transport.Transport, cfg *idem.Config, m idem.Machine) *idem.Engine {
	t.Helper()
	e, err := idem.NewEngine(st, tr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(m); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return e
}

func (b *RequestBundle) clock() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.now
}

// Advance moves the shared clock.
func (b *RequestBundle) Advance(d time.Duration) {
	b.mu.Lock()
	b.now = b.now.Add(d)
	b.mu.Unlock()
}

// Publish publishes msg, with causation ID causation, through the orders
// engine's transport.
func (b *RequestBundle) Publish(id, causation string, msg any) transport.Envelope {
	b.t.Helper()
	env, err := b.Orders.NewEnvelope(id, msg)
	if err != nil {
		b.t.Fatal(err)
	}
	env.CausationID = causation
	if err := b.Orders.Publish(context.Background(), env); err != nil {
		b.t.Fatal(err)
	}
	return env
}

// Order loads the order saga key (nil when none).
func (b *RequestBundle) Order(key string) *store.Instance {
	b.t.Helper()
	return b.load(store.Key{SagaType: OrdersType, Key: key}, nil).Instances[store.Key{SagaType: OrdersType, Key: key}]
}

// Seen reports whether the orders saga key's inbox holds env.
func (b *RequestBundle) Seen(key string, env transport.Envelope) bool {
	b.t.Helper()
	ik := store.InboxKey{SagaType: OrdersType, Key: key, MessageID: env.Type + "\x1f" + env.DedupID()}
	return b.load(store.Key{}, []store.InboxKey{ik}).Seen[ik]
}

func (b *RequestBundle) load(k store.Key, inbox []store.InboxKey) *store.LoadResult {
	b.t.Helper()
	ctx := context.Background()
	uow, err := b.St.Begin(ctx)
	if err != nil {
		b.t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	p := &store.LoadParams{Inbox: inbox}
	if k.Key != "" {
		p.Keys = []store.Key{k}
	}
	r, err := uow.Load(ctx, p)
	if err != nil {
		b.t.Fatal(err)
	}
	return r
}

// WaitOrder waits until the order key is in state with the result.
func (b *RequestBundle) WaitOrder(key, state, result string) {
	b.t.Helper()
	Eventually(b.t, func() string {
		in := b.Order(key)
		if in == nil {
			return "no saga"
		}
		var o Order
		if err := json.Unmarshal(in.Data, &o); err != nil {
			return fmt.Sprintf("decode %s: %v", in.Data, err)
		}
		if in.State != state || o.Result != result {
			return fmt.Sprintf("state %s, result %q; want %s, %q", in.State, o.Result, state, result)
		}
		return ""
	})
}

// WaitSent waits until n distinct messages of typ were published through
// r and returns them.
func (b *RequestBundle) WaitSent(r *Router, typ string, n int) []transport.Envelope {
	b.t.Helper()
	Eventually(b.t, func() string {
		if got := len(r.Sent(typ)); got != n {
			return fmt.Sprintf("%d messages of type %s published, want %d", got, typ, n)
		}
		return ""
	})
	return r.Sent(typ)
}

// Eventually polls cond, which returns what is still wrong ("" when
// nothing), until it holds or 30 seconds pass.
func Eventually(t testing.TB, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	pause := time.Millisecond
	for {
		why := cond()
		if why == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal(why)
		}
		time.Sleep(pause) // polling an observable outcome, not synchronising
		pause = min(2*pause, 50*time.Millisecond)
	}
}

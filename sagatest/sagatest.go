// Package sagatest drives a saga machine through a real Idem engine in
// memory, so that users can test their machines the way production runs
// them: with duplicates, concurrent copies on several engine replicas, and
// timers, and then assert the saga's state, the messages it emitted and the
// dead letters.
//
//	h := sagatest.New(t, m, &sagatest.Options{Copies: 3, Replicas: 2})
//	h.Deliver("msg-1", OrderPlaced{OrderID: "o-1"})
//	h.Settle()
//	h.AssertState("o-1", "AwaitingPayment")
//	h.AssertEmittedCount("orders.ChargeCard", 1)
package sagatest

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
	"github.com/idemhq/idem/internal/enginestats"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// Options configure a Harness. The zero value means the defaults.
type Options struct {
	// Copies is how many times each delivered message is published
	// (default 1). Copies are separate deliveries that replicas may take
	// concurrently.
	Copies int
	// Replicas is how many engines share the store and the transport
	// (default 1).
	Replicas int
	// Start is the initial reading of the harness clock (default
	// 2026-01-01T00:00:00Z). The clock moves only with Advance.
	Start time.Time
	// Engine is the engine configuration; Clock and Logger are set by the
	// harness (Logger only when nil, to discard).
	Engine idem.Config
	// Timeout bounds Settle (default 10s).
	Timeout time.Duration
}

// Harness runs a machine on in-memory engines. Its methods must be called
// from the test's goroutine.
type Harness[S any] struct {
	t    testing.TB
	m    *saga.Machine[S]
	opts Options
	// Store is the shared in-memory store; read instances, timers and
	// dead letters from it.
	Store *memstore.Store
	// Mem is the shared in-memory transport.
	Mem *memtransport.Transport
	// Engines are the replicas, Options.Replicas of them.
	Engines []*idem.Engine

	mu       sync.Mutex
	now      time.Time
	captured []idem.Envelope
	consumed map[string]bool
}

// New starts opts.Replicas engines running m on a fresh memstore and
// memtransport, and stops them when the test ends. opts may be nil.
func New[S any](t testing.TB, m *saga.Machine[S], opts *Options) *Harness[S] {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Copies < 1 {
		o.Copies = 1
	}
	if o.Replicas < 1 {
		o.Replicas = 1
	}
	if o.Start.IsZero() {
		o.Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if o.Timeout == 0 {
		o.Timeout = 10 * time.Second
	}
	h := &Harness[S]{
		t: t, m: m, opts: o, now: o.Start,
		Store:    memstore.New(nil),
		Mem:      memtransport.New(&memtransport.Config{Lease: 2 * time.Second}),
		consumed: map[string]bool{},
	}
	for _, typ := range m.MessageTypes() {
		h.consumed[typ] = true
	}
	cfg := o.Engine
	cfg.Clock = h.Now
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.RetryBase == 0 {
		cfg.RetryBase, cfg.RetryMax = time.Millisecond, 10*time.Millisecond
	}
	// Timers, the relay and the sweeper run when the test says so (Advance,
	// Relay, Sweep), not on a background cadence that races with it.
	for _, d := range []*time.Duration{&cfg.TimerInterval, &cfg.SweepInterval, &cfg.RelayInterval} {
		if *d == 0 {
			*d = 24 * time.Hour
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, e := range h.Engines {
			if err := e.Stop(ctx); err != nil && !errors.Is(err, transport.ErrClosed) {
				t.Errorf("sagatest: stop engine: %v", err)
			}
		}
		_ = h.Mem.Close()
		_ = h.Store.Close()
	})
	tr := &capture{Transport: h.Mem, h: h.captureFn}
	for range o.Replicas {
		e, err := idem.NewEngine(h.Store, tr, &cfg)
		if err != nil {
			t.Fatalf("sagatest: new engine: %v", err)
		}
		if err := e.Register(m); err != nil {
			t.Fatalf("sagatest: register %s: %v", m.Name(), err)
		}
		if err := e.Start(context.Background()); err != nil {
			t.Fatalf("sagatest: start engine: %v", err)
		}
		h.Engines = append(h.Engines, e)
	}
	return h
}

// Now returns the harness clock, which the engines use.
func (h *Harness[S]) Now() time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.now
}

// capture keeps what the saga emits for other services (messages carrying
// the emitting saga's header whose type the machine does not consume) and
// passes everything else to the transport.
type capture struct {
	transport.Transport
	h func([]transport.Envelope) []transport.Envelope
}

func (c *capture) Publish(ctx context.Context, msgs []transport.Envelope) error {
	if fwd := c.h(msgs); len(fwd) > 0 {
		return c.Transport.Publish(ctx, fwd)
	}
	return nil
}

func (h *Harness[S]) captureFn(msgs []transport.Envelope) []transport.Envelope {
	h.mu.Lock()
	defer h.mu.Unlock()
	var fwd []transport.Envelope
	for _, m := range msgs {
		if h.consumed[m.Type] || m.Headers[transport.HeaderSagaType] == "" {
			fwd = append(fwd, m)
			continue
		}
		h.captured = append(h.captured, m.Clone())
	}
	return fwd
}

// Deliver publishes msg with message ID id, Options.Copies times. It does
// not wait; call Settle.
func (h *Harness[S]) Deliver(id string, msg any) {
	h.t.Helper()
	h.DeliverN(id, msg, h.opts.Copies)
}

// DeliverN publishes msg with message ID id n times.
func (h *Harness[S]) DeliverN(id string, msg any, n int) {
	h.t.Helper()
	env, err := h.Engines[0].NewEnvelope(id, msg)
	if err != nil {
		h.t.Fatalf("sagatest: deliver %q: %v", id, err)
	}
	h.DeliverEnvelope(env, n)
}

// DeliverEnvelope publishes env n times (Options.Copies when n < 1) straight
// to the transport, as it is: use it for malformed input, including
// envelopes without an ID or of unknown types.
func (h *Harness[S]) DeliverEnvelope(env idem.Envelope, n int) {
	h.t.Helper()
	if n < 1 {
		n = h.opts.Copies
	}
	envs := make([]idem.Envelope, n)
	for i := range envs {
		envs[i] = env.Clone()
	}
	if err := h.Mem.Publish(context.Background(), envs); err != nil {
		h.t.Fatalf("sagatest: deliver %q: %v", env.ID, err)
	}
}

// Relay runs the outbox relay once on every row, as a replica would after
// another crashed between commit and publish.
func (h *Harness[S]) Relay() {
	h.t.Helper()
	if _, err := h.Engines[0].RelayOutbox(context.Background(), 0); err != nil {
		h.t.Fatalf("sagatest: relay outbox: %v", err)
	}
	h.Settle()
}

// Sweep runs the sweeper once at the harness clock.
func (h *Harness[S]) Sweep() store.SweepResult {
	h.t.Helper()
	r, err := h.Engines[0].Sweep(context.Background())
	if err != nil {
		h.t.Fatalf("sagatest: sweep: %v", err)
	}
	return r
}

// Settle waits until every published message has been processed and
// acknowledged, and fails the test after Options.Timeout.
func (h *Harness[S]) Settle() {
	h.t.Helper()
	deadline := time.Now().Add(h.opts.Timeout)
	for h.Mem.Unsettled() > 0 {
		if time.Now().After(deadline) {
			h.t.Fatalf("sagatest: %d messages still pending after %s; stats %+v", h.Mem.Unsettled(), h.opts.Timeout, h.Mem.Stats())
		}
		time.Sleep(time.Millisecond) // polling a condition with a deadline
	}
}

// Advance moves the clock forward by d, fires the timers that fell due and
// settles.
func (h *Harness[S]) Advance(d time.Duration) {
	h.t.Helper()
	h.mu.Lock()
	h.now = h.now.Add(d)
	h.mu.Unlock()
	if _, err := h.Engines[0].RunTimers(context.Background()); err != nil {
		h.t.Fatalf("sagatest: fire timers: %v", err)
	}
	h.Settle()
}

// Instance returns the stored instance for key, or nil.
func (h *Harness[S]) Instance(key string) *store.Instance {
	h.t.Helper()
	ctx := context.Background()
	uow, err := h.Store.Begin(ctx)
	if err != nil {
		h.t.Fatalf("sagatest: begin: %v", err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	k := store.Key{SagaType: h.m.Name(), Key: key}
	r, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
	if err != nil {
		h.t.Fatalf("sagatest: load %s: %v", key, err)
	}
	return r.Instances[k]
}

// State returns the saga's state name and decoded state document; ok is
// false when no saga exists for key.
func (h *Harness[S]) State(key string) (state saga.State, data S, ok bool) {
	h.t.Helper()
	in := h.Instance(key)
	if in == nil {
		return "", data, false
	}
	if err := json.Unmarshal(in.Data, &data); err != nil {
		h.t.Fatalf("sagatest: decode state of %s: %v", key, err)
	}
	return saga.State(in.State), data, true
}

// AssertState fails the test unless the saga for key is in state want.
func (h *Harness[S]) AssertState(key string, want saga.State) {
	h.t.Helper()
	got, _, ok := h.State(key)
	if !ok {
		h.t.Errorf("saga %s/%s: got no saga, want state %s", h.m.Name(), key, want)
		return
	}
	if got != want {
		h.t.Errorf("saga %s/%s: got state %s, want %s", h.m.Name(), key, got, want)
	}
}

// AssertNoSaga fails the test if a saga exists for key.
func (h *Harness[S]) AssertNoSaga(key string) {
	h.t.Helper()
	if got, _, ok := h.State(key); ok {
		h.t.Errorf("saga %s/%s: got state %s, want no saga", h.m.Name(), key, got)
	}
}

// Emitted returns the distinct messages (by ID, first publication first)
// the saga emitted for other consumers: the types the machine does not
// consume itself. Re-sends of one message with the same ID appear once.
func (h *Harness[S]) Emitted() []idem.Envelope {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen := map[string]bool{}
	var out []idem.Envelope
	for _, m := range h.captured {
		if !seen[m.ID] {
			seen[m.ID] = true
			out = append(out, m)
		}
	}
	return out
}

// EmittedOf returns the distinct emitted messages of type msgType.
func (h *Harness[S]) EmittedOf(msgType string) []idem.Envelope {
	var out []idem.Envelope
	for _, m := range h.Emitted() {
		if m.Type == msgType {
			out = append(out, m)
		}
	}
	return out
}

// AssertEmittedCount fails the test unless exactly want distinct messages
// of type msgType were emitted.
func (h *Harness[S]) AssertEmittedCount(msgType string, want int) {
	h.t.Helper()
	got := h.EmittedOf(msgType)
	if len(got) != want {
		ids := make([]string, len(got))
		for i := range got {
			ids[i] = got[i].ID
		}
		h.t.Errorf("emitted %s: got %d distinct messages %v, want %d%s", msgType, len(got), ids, want, h.emittedTypes())
	}
}

// emittedTypes names the emitted types, for failure messages: "ShipOrder"
// instead of "orders.ShipOrder" is the classic mistake.
func (h *Harness[S]) emittedTypes() string {
	seen := map[string]bool{}
	var types []string
	for _, m := range h.Emitted() {
		if !seen[m.Type] {
			seen[m.Type] = true
			types = append(types, m.Type)
		}
	}
	if len(types) == 0 {
		return " (nothing was emitted)"
	}
	return fmt.Sprintf(" (emitted types: %v)", types)
}

// DeadLetters returns every dead letter.
func (h *Harness[S]) DeadLetters() []store.DeadLetter {
	h.t.Helper()
	dls, err := h.Store.ListDeadLetters(context.Background(), &store.ListParams{Limit: 1 << 20})
	if err != nil {
		h.t.Fatalf("sagatest: list dead letters: %v", err)
	}
	return dls
}

// AssertDeadLetters fails the test unless the dead letters' reasons are
// exactly want, in any order.
func (h *Harness[S]) AssertDeadLetters(want ...string) {
	h.t.Helper()
	var got, detail []string
	for _, dl := range h.DeadLetters() {
		got = append(got, dl.Reason)
		detail = append(detail, fmt.Sprintf("%s (%s): %s", dl.ID, dl.Envelope.Type, dl.Reason))
	}
	slices.Sort(got)
	w := slices.Clone(want)
	slices.Sort(w)
	if !slices.Equal(got, w) {
		h.t.Errorf("dead letters: got reasons %v, want %v; dead letters: %v", got, w, detail)
	}
}

// Stats sums the counters of every engine.
func (h *Harness[S]) Stats() idem.Stats { return enginestats.Sum(h.Engines...) }

// String describes the harness for failure messages.
func (h *Harness[S]) String() string {
	return fmt.Sprintf("sagatest harness for %s (%d replicas, %d copies)", h.m.Name(), h.opts.Replicas, h.opts.Copies)
}

package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginestats"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// TestMain checks that no test leaves a goroutine behind: every engine is
// stopped and every memtransport closed by the tests' cleanups.
func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		// A crash-test child: it is expected to possibly die; no leak check.
		os.Exit(m.Run())
	}
	goleak.VerifyTestMain(m)
}

// ---------------------------------------------------------------------------
// The test machine: a counter saga.
//
//	Initial --Inc--> Open --Close/Timeout--> Closed (final)
//
// Inc adds N to the total and publishes Incremented (plus Notes extra Note
// events); the first Inc schedules a Timeout. Close and Disarm unschedule it.
// Poke is bound but handled nowhere: in Open it is an unhandled event, with
// no saga it can never start one.
// ---------------------------------------------------------------------------

const (
	counterType = "counter"
	timerName   = "timeout"
)

// Counter is the counter saga's state document (schema version 1 without
// upgrades, 2 with the test upgrade).
type Counter struct {
	Total    int  `json:"total"`
	Incs     int  `json:"incs"`
	TimedOut bool `json:"timed_out,omitempty"`
}

// Inc increments the counter of Key by N.
type Inc struct {
	Key   string `json:"key"`
	N     int    `json:"n"`
	Notes int    `json:"notes,omitempty"`
}

// Validate refuses negative increments.
func (m Inc) Validate() error {
	if m.N < 0 {
		return fmt.Errorf("inc %s: negative n %d", m.Key, m.N)
	}
	return nil
}

// Close finishes the counter.
type Close struct {
	Key string `json:"key"`
}

// Disarm unschedules the timeout and keeps the counter open.
type Disarm struct {
	Key string `json:"key"`
}

// Poke is handled in no state.
type Poke struct {
	Key string `json:"key"`
}

// Timeout is the counter's timer message.
type Timeout struct {
	Key string `json:"key"`
}

// Incremented is the event every applied Inc publishes (the countable
// effect).
type Incremented struct {
	Key   string `json:"key"`
	N     int    `json:"n"`
	Total int    `json:"total"`
}

// Note is an extra event, to get several emissions from one message.
type Note struct {
	Key string `json:"key"`
	I   int    `json:"i"`
}

var (
	incType         = saga.MessageType(Inc{})
	incrementedType = saga.MessageType(Incremented{})
	noteType        = saga.MessageType(Note{})
)

type counterOpts struct {
	notFoundDeadLetter bool
	// upgrade registers Upgrade(1, …): version 1 stored {"count": n}.
	upgrade bool
	// onInc runs before every Inc is applied; its error stops the message.
	onInc func(c *saga.Context[Counter], m Inc) error
	// timeout is the delay of the timer scheduled on open (default 1h).
	timeout time.Duration
}

func newCounter(o *counterOpts) *saga.Machine[Counter] {
	if o == nil {
		o = &counterOpts{}
	}
	timeout := o.timeout
	if timeout == 0 {
		timeout = time.Hour
	}
	m := saga.New[Counter](counterType)
	open, closed := m.State("Open"), m.Final("Closed")
	inc := saga.NewEvent[Inc](m, func(e Inc) string { return e.Key })
	cls := saga.NewEvent[Close](m, func(e Close) string { return e.Key })
	dis := saga.NewEvent[Disarm](m, func(e Disarm) string { return e.Key })
	_ = saga.NewEvent[Poke](m, func(e Poke) string { return e.Key })
	tmo := saga.NewEvent[Timeout](m, func(e Timeout) string { return e.Key })
	if o.notFoundDeadLetter {
		m.OnNotFound(saga.NotFoundDeadLetter)
	}
	if o.upgrade {
		m.Upgrade(1, func(old json.RawMessage) (json.RawMessage, error) {
			var v1 struct {
				Count int `json:"count"`
			}
			if err := json.Unmarshal(old, &v1); err != nil {
				return nil, err
			}
			return json.Marshal(Counter{Total: v1.Count})
		})
	}
	add := func(c *saga.Context[Counter], e Inc) error {
		if o.onInc != nil {
			if err := o.onInc(c, e); err != nil {
				return err
			}
		}
		c.Data.Total += e.N
		c.Data.Incs++
		c.Publish(Incremented{Key: c.Key(), N: e.N, Total: c.Data.Total})
		for i := range e.Notes {
			c.Publish(Note{Key: c.Key(), I: i})
		}
		return nil
	}
	unschedule := func(c *saga.Context[Counter], _ Close) error {
		c.Unschedule(timerName)
		return nil
	}
	m.Initially(saga.When(inc).Then(add).Then(func(c *saga.Context[Counter], e Inc) error {
		c.Schedule(timerName, timeout, Timeout{Key: e.Key})
		return nil
	}).TransitionTo(open))
	m.During(open,
		saga.When(inc).Then(add),
		saga.When(cls).Then(unschedule).TransitionTo(closed),
		saga.When(dis).Then(func(c *saga.Context[Counter], _ Disarm) error {
			c.Unschedule(timerName)
			return nil
		}),
		saga.When(tmo).Then(func(c *saga.Context[Counter], _ Timeout) error {
			c.Data.TimedOut = true
			return nil
		}).TransitionTo(closed),
	)
	return m
}

// ---------------------------------------------------------------------------
// A clock the test moves by hand.
// ---------------------------------------------------------------------------

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

var epoch = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newClock() *fakeClock { return &fakeClock{now: epoch} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// ---------------------------------------------------------------------------
// recorder wraps a transport: it records every envelope the transport
// accepted and every Nack, swallows the event types nobody consumes
// (Incremented, Note), and can fail publishes or alter deliveries.
// ---------------------------------------------------------------------------

type nackRecord struct {
	id      string
	attempt int
	delay   time.Duration
}

type recorder struct {
	transport.Transport

	mu        sync.Mutex
	published []idem.Envelope
	nacks     []nackRecord
	swallow   map[string]bool
	// failPublish, when it returns true for a batch, makes Publish fail
	// without handing anything to the transport.
	failPublish func([]idem.Envelope) bool
	// alter may change deliveries before the engine sees them.
	alter func(*transport.Delivery)
	// onAck, when set, sees every acknowledgement before the transport.
	onAck func([]transport.Delivery)
}

func (r *recorder) Ack(ctx context.Context, ds []transport.Delivery) error {
	r.mu.Lock()
	f := r.onAck
	r.mu.Unlock()
	if f != nil {
		f(ds)
	}
	return r.Transport.Ack(ctx, ds)
}

func newRecorder(tr transport.Transport) *recorder {
	return &recorder{Transport: tr, swallow: map[string]bool{incrementedType: true, noteType: true}}
}

func (r *recorder) Publish(ctx context.Context, msgs []idem.Envelope) error {
	r.mu.Lock()
	fail := r.failPublish
	r.mu.Unlock()
	if fail != nil && fail(msgs) {
		return errors.New("recorder: injected publish failure")
	}
	var fwd []idem.Envelope
	for _, m := range msgs {
		if !r.swallow[m.Type] {
			fwd = append(fwd, m)
		}
	}
	if len(fwd) > 0 {
		if err := r.Transport.Publish(ctx, fwd); err != nil {
			return err
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		r.published = append(r.published, m.Clone())
	}
	return nil
}

func (r *recorder) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	ds, err := r.Transport.Receive(ctx, max)
	r.mu.Lock()
	alter := r.alter
	r.mu.Unlock()
	if alter != nil {
		for i := range ds {
			alter(&ds[i])
		}
	}
	return ds, err
}

func (r *recorder) Nack(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	r.mu.Lock()
	r.nacks = append(r.nacks, nackRecord{id: d.Envelope.ID, attempt: d.Attempt, delay: delay})
	r.mu.Unlock()
	return r.Transport.Nack(ctx, d, delay)
}

func (r *recorder) setAlter(f func(*transport.Delivery)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.alter = f
}

func (r *recorder) setFailPublish(f func([]idem.Envelope) bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failPublish = f
}

// sent returns every accepted envelope of type typ (re-sends included).
func (r *recorder) sent(typ string) []idem.Envelope {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []idem.Envelope
	for _, m := range r.published {
		if m.Type == typ {
			out = append(out, m)
		}
	}
	return out
}

// distinctIDs returns the sorted distinct IDs of the accepted envelopes of
// type typ.
func (r *recorder) distinctIDs(typ string) []string {
	seen := map[string]bool{}
	var out []string
	for _, m := range r.sent(typ) {
		if !seen[m.ID] {
			seen[m.ID] = true
			out = append(out, m.ID)
		}
	}
	sort.Strings(out)
	return out
}

func (r *recorder) nacked() []nackRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]nackRecord(nil), r.nacks...)
}

// ---------------------------------------------------------------------------
// hookStore wraps a store to inject faults into units of work.
// ---------------------------------------------------------------------------

type hookStore struct {
	store.Store
	// beforeBegin, when it returns an error, is returned by Begin (the
	// store is unreachable).
	beforeBegin func() error
	// beforeCommit, when it returns an error, is returned by Commit
	// instead of committing.
	beforeCommit func(*store.Changes) error
	// afterCommit sees the real outcome of a commit and returns the one
	// reported to the engine.
	afterCommit func(*store.Changes, error) error
	// afterLoad runs after every successful Load.
	afterLoad func(*store.LoadParams)
	// failDeleteTimers makes DeleteTimers fail once (a crash after the
	// timers were published).
	failDeleteTimers atomic.Bool
	// sweeps records the params and results of Sweep calls.
	mu     sync.Mutex
	sweeps []sweepCall
	// open counts the units of work begun and not yet committed or rolled
	// back; maxOpen is the most open at once.
	open, maxOpen atomic.Int32
}

func (s *hookStore) DeleteTimers(ctx context.Context, ts []store.Timer) error {
	if s.failDeleteTimers.CompareAndSwap(true, false) {
		return errors.New("injected: crashed before deleting fired timers")
	}
	return s.Store.DeleteTimers(ctx, ts)
}

// BeginReplay and SettleReplays pass store.DeadLetterReplayer through
// (the wrapped store is a memstore).
func (s *hookStore) BeginReplay(ctx context.Context, id string, at time.Time) error {
	return s.Store.(store.DeadLetterReplayer).BeginReplay(ctx, id, at)
}

func (s *hookStore) SettleReplays(ctx context.Context, p *store.SettleReplaysParams) error {
	return s.Store.(store.DeadLetterReplayer).SettleReplays(ctx, p)
}

func (s *hookStore) sweepCalls() []sweepCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sweepCall(nil), s.sweeps...)
}

type sweepCall struct {
	limit int
	res   store.SweepResult
}

func (s *hookStore) Begin(ctx context.Context) (store.UnitOfWork, error) {
	if s.beforeBegin != nil {
		if err := s.beforeBegin(); err != nil {
			return nil, err
		}
	}
	u, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	n := s.open.Add(1)
	for m := s.maxOpen.Load(); n > m && !s.maxOpen.CompareAndSwap(m, n); m = s.maxOpen.Load() {
	}
	return &hookUOW{UnitOfWork: u, s: s}, nil
}

func (s *hookStore) Sweep(ctx context.Context, p *store.SweepParams) (*store.SweepResult, error) {
	r, err := s.Store.Sweep(ctx, p)
	if err == nil {
		s.mu.Lock()
		s.sweeps = append(s.sweeps, sweepCall{limit: p.Limit, res: *r})
		s.mu.Unlock()
	}
	return r, err
}

type hookUOW struct {
	store.UnitOfWork
	s     *hookStore
	ended atomic.Bool
}

// end counts the unit of work as ended, once.
func (u *hookUOW) end() {
	if u.ended.CompareAndSwap(false, true) {
		u.s.open.Add(-1)
	}
}

func (u *hookUOW) Rollback(ctx context.Context) error {
	u.end()
	return u.UnitOfWork.Rollback(ctx)
}

func (u *hookUOW) Load(ctx context.Context, p *store.LoadParams) (*store.LoadResult, error) {
	r, err := u.UnitOfWork.Load(ctx, p)
	if err == nil && u.s.afterLoad != nil {
		u.s.afterLoad(p)
	}
	return r, err
}

func (u *hookUOW) Commit(ctx context.Context, c *store.Changes) error {
	defer u.end()
	if u.s.beforeCommit != nil {
		if err := u.s.beforeCommit(c); err != nil {
			_ = u.UnitOfWork.Rollback(ctx)
			return err
		}
	}
	err := u.UnitOfWork.Commit(ctx, c)
	if u.s.afterCommit != nil {
		err = u.s.afterCommit(c, err)
	}
	return err
}

// writesState reports whether c inserts or updates an instance.
func writesState(c *store.Changes) bool { return len(c.Inserts)+len(c.Updates) > 0 }

// ---------------------------------------------------------------------------
// setup: a bundle of memstore, memtransport, recorder, clock and engines.
// ---------------------------------------------------------------------------

type options struct {
	machine  idem.Machine // nil: newCounter(nil), unless handlers are set
	handlers map[string]idem.HandlerFunc
	cfg      idem.Config
	mem      memtransport.Config
	replicas int
	// hooks, when set, wraps the memstore.
	hooks *hookStore
	// noStart leaves the engines unstarted (b.start starts them).
	noStart bool
	// store and mem, when set, are shared with another bundle.
	shareStore *memstore.Store
	shareMem   *memtransport.Transport
}

type bundle struct {
	t       *testing.T
	ctx     context.Context
	clock   *fakeClock
	mem     *memtransport.Transport
	rec     *recorder
	mstore  *memstore.Store
	st      store.Store // what the engines use (mstore or hooks)
	machine idem.Machine
	engines []*idem.Engine

	stopOnce sync.Once
}

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

func setup(t *testing.T, o *options) *bundle {
	t.Helper()
	if o == nil {
		o = &options{}
	}
	b := &bundle{t: t, ctx: context.Background(), clock: newClock()}
	b.mstore = o.shareStore
	if b.mstore == nil {
		b.mstore = memstore.New(nil)
	}
	b.mem = o.shareMem
	if b.mem == nil {
		memCfg := o.mem
		b.mem = memtransport.New(&memCfg)
	}
	b.rec = newRecorder(b.mem)
	b.st = b.mstore
	if o.hooks != nil {
		o.hooks.Store = b.mstore
		b.st = o.hooks
	}
	b.machine = o.machine
	if b.machine == nil && o.handlers == nil {
		b.machine = newCounter(nil)
	}
	cfg := o.cfg
	if cfg.Logger == nil {
		cfg.Logger = discard
	}
	if cfg.Clock == nil {
		cfg.Clock = b.clock.Now
	}
	if cfg.RetryBase == 0 && cfg.RetryMax == 0 {
		cfg.RetryBase, cfg.RetryMax = time.Millisecond, 5*time.Millisecond
	}
	// Background loops stay out of the way; tests call RunTimers,
	// RelayOutbox and Sweep themselves.
	for _, p := range []*time.Duration{&cfg.TimerInterval, &cfg.SweepInterval, &cfg.RelayInterval} {
		if *p == 0 {
			*p = time.Hour
		}
	}
	replicas := max(o.replicas, 1)
	for range replicas {
		e, err := idem.NewEngine(b.st, b.rec, &cfg)
		if err != nil {
			t.Fatalf("NewEngine: %v", err)
		}
		if b.machine != nil {
			if err := e.Register(b.machine); err != nil {
				t.Fatalf("Register: %v", err)
			}
		}
		for typ, fn := range o.handlers {
			if err := e.Handle(typ, fn); err != nil {
				t.Fatalf("Handle(%s): %v", typ, err)
			}
		}
		b.engines = append(b.engines, e)
	}
	t.Cleanup(func() {
		b.stop()
		if o.shareMem == nil {
			_ = b.mem.Close()
		}
		if o.shareStore == nil {
			_ = b.mstore.Close()
		}
	})
	if !o.noStart {
		b.start()
	}
	return b
}

func (b *bundle) start() {
	b.t.Helper()
	for _, e := range b.engines {
		if err := e.Start(context.Background()); err != nil {
			b.t.Fatalf("Start: %v", err)
		}
	}
}

// stop stops every engine (once); stats are final afterwards.
func (b *bundle) stop() {
	b.stopOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, e := range b.engines {
			if err := e.Stop(ctx); err != nil {
				b.t.Errorf("Stop: %v", err)
			}
		}
	})
}

func (b *bundle) engine() *idem.Engine { return b.engines[0] }

// env builds an envelope for msg with the engine's correlation ID.
func (b *bundle) env(id string, msg any) idem.Envelope {
	b.t.Helper()
	env, err := b.engine().NewEnvelope(id, msg)
	if err != nil {
		b.t.Fatalf("NewEnvelope(%s): %v", id, err)
	}
	return env
}

func (b *bundle) publish(envs ...idem.Envelope) {
	b.t.Helper()
	if err := b.engine().Publish(b.ctx, envs...); err != nil {
		b.t.Fatalf("Publish: %v", err)
	}
}

func (b *bundle) send(id string, msg any) {
	b.t.Helper()
	b.publish(b.env(id, msg))
}

// settle waits until the transport holds no unacknowledged entry.
func (b *bundle) settle() {
	b.t.Helper()
	eventuallyf(b.t, 30*time.Second, func() bool { return b.mem.Unsettled() == 0 },
		func() string {
			return fmt.Sprintf("%d messages pending; transport %+v", b.mem.Unsettled(), b.mem.Stats())
		})
}

// instance loads the stored instance for key (nil when none).
func (b *bundle) instance(key string) *store.Instance {
	b.t.Helper()
	return loadInstance(b.t, b.mstore, counterType, key)
}

func loadInstance(t *testing.T, st store.Store, sagaType, key string) *store.Instance {
	t.Helper()
	ctx := context.Background()
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	k := store.Key{SagaType: sagaType, Key: key}
	r, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
	if err != nil {
		t.Fatalf("Load %s: %v", key, err)
	}
	return r.Instances[k]
}

// seen reports whether the inbox holds messageID for the saga.
func seen(t *testing.T, st store.Store, ik store.InboxKey) bool {
	t.Helper()
	ctx := context.Background()
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatalf("Begin: %v", err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	r, err := uow.Load(ctx, &store.LoadParams{Inbox: []store.InboxKey{ik}})
	if err != nil {
		t.Fatalf("Load inbox: %v", err)
	}
	return r.Seen[ik]
}

// counter returns the decoded state of the counter for key; it fails the
// test when there is none.
func (b *bundle) counter(key string) (Counter, *store.Instance) {
	b.t.Helper()
	in := b.instance(key)
	if in == nil {
		b.t.Fatalf("counter %q: no saga", key)
	}
	var c Counter
	if err := json.Unmarshal(in.Data, &c); err != nil {
		b.t.Fatalf("counter %q: decode %s: %v", key, in.Data, err)
	}
	return c, in
}

func (b *bundle) journal(key string) []store.JournalEntry {
	b.t.Helper()
	j, err := b.mstore.Journal(b.ctx, store.Key{SagaType: counterType, Key: key})
	if err != nil {
		b.t.Fatalf("Journal: %v", err)
	}
	return j
}

func (b *bundle) deadLetters() []store.DeadLetter {
	b.t.Helper()
	dls, err := b.mstore.ListDeadLetters(b.ctx, &store.ListParams{Limit: 1 << 20})
	if err != nil {
		b.t.Fatalf("ListDeadLetters: %v", err)
	}
	return dls
}

func (b *bundle) instances() []*store.Instance {
	b.t.Helper()
	ins, err := b.mstore.ListInstances(b.ctx, &store.ListParams{Limit: 1 << 20})
	if err != nil {
		b.t.Fatalf("ListInstances: %v", err)
	}
	return ins
}

func (b *bundle) backlog() int {
	b.t.Helper()
	n, _, err := b.mstore.OutboxBacklog(b.ctx)
	if err != nil {
		b.t.Fatalf("OutboxBacklog: %v", err)
	}
	return n
}

// stats sums the counters of every engine of the bundle.
func (b *bundle) stats() idem.Stats {
	return sumStats(b.engines...)
}

func sumStats(es ...*idem.Engine) idem.Stats { return enginestats.Sum(es...) }

// ---------------------------------------------------------------------------
// Waiting without sleeping as synchronisation: poll a condition with a
// deadline.
// ---------------------------------------------------------------------------

func eventually(t testing.TB, cond func() bool) {
	t.Helper()
	eventuallyf(t, 30*time.Second, cond, func() string { return "condition not met" })
}

func eventuallyf(t testing.TB, within time.Duration, cond func() bool, why func() string) {
	t.Helper()
	if !poll(within, cond) {
		t.Fatalf("after %s: %s", within, why())
	}
}

// poll reports whether cond became true within d, checking every
// millisecond.
func poll(d time.Duration, cond func() bool) bool {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		if cond() {
			return true
		}
		select {
		case <-deadline.C:
			return cond()
		case <-tick.C:
		}
	}
}

// callCounter counts calls per message ID.
type callCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *callCounter) inc(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[id]++
	return c.n[id]
}

func (c *callCounter) get(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// memTransportConfig returns a fault-free transport configuration that
// enqueues dup extra copies of every message.
func memTransportConfig(dup int) memtransport.Config {
	return memtransport.Config{Duplicate: dup}
}

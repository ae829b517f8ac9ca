package idem

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/internal/engineaccess"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Log attribute keys used on every line about a message.
const (
	logSagaType  = "saga_type"
	logSagaKey   = "saga_key"
	logMessageID = "message_id"
	logAttempt   = "attempt"
	logReason    = "reason"
)

// ErrRunning is returned by Register, Handle and Start when the engine has
// already started.
var ErrRunning = errors.New("engine already started")

// ErrStopped is returned by Start after Stop: an engine runs once; create a
// new Engine to run again.
var ErrStopped = errors.New("engine stopped: create a new Engine to run again")

// HandlerFunc handles one message outside any saga: a consumer with side
// effects (calling a service, writing a file). The engine records the
// message ID in the inbox after the handler returns nil, so a message whose
// handler succeeded and committed is not handled again. Handlers are still
// at-least-once: a crash between the effect and that record, or two copies
// of the message taken by two replicas at the same moment, run the handler
// again; so handlers must be idempotent and can use env.DedupID() as their
// idempotency key. Errors are classified like saga handler errors
// (Permanent, RetryAfter); a panic is a permanent error. Handlers must
// return when ctx is cancelled: Stop waits for them.
type HandlerFunc func(ctx context.Context, env Envelope) error

// Engine runs sagas. Create it with NewEngine, register machines and
// handlers, then Start it; Stop finishes the batch in flight. Methods are
// safe for concurrent use.
//
// The Engine is a façade over the parts it holds (docs/architecture.md):
// the registry; the pipeline a batch runs through (consumers, planner,
// units with their lanes and steps, settler); the background services
// (relay, timer poller with the schedule firer, sweeper); dead-letter
// replays; and the observers that count and trace it all.
type Engine struct {
	*base
	reg      *registry
	counters *counters
	plan     *planner
	units    *units
	relay    *relay
	timers   *timerPoller
	sweeper  *sweeper
	firer    *scheduleFirer
	replays  *replays
	beat     *heartbeat

	mu      sync.Mutex // guards reg until Start, and the lifecycle
	started bool
	stopped bool
	stop    context.CancelFunc // stops receiving and the background loops
	abort   context.CancelFunc // cancels in-flight work
	done    chan struct{}
	runErr  error
}

// NewEngine returns an engine that keeps state in st and exchanges messages
// over tr. When tr is st itself and st implements store.Queue, deliveries
// are consumed and emitted messages enqueued inside each unit of work. cfg
// may be nil; an invalid cfg is refused with an error naming the field.
func NewEngine(st store.Store, tr transport.Transport, cfg *Config) (*Engine, error) {
	if st == nil || tr == nil {
		return nil, errors.New("idem: NewEngine needs a store and a transport")
	}
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	caps := resolveCapabilities(st, tr)
	caps.leases.limit(c.MaxLeaseRenewal, c.Logger)
	if caps.singleWriter && (cfg == nil || cfg.Consumers == 0) {
		c.Consumers = 1
	}
	if err := fitBodyLimit(&c, cfg, caps.maxMessage); err != nil {
		return nil, err
	}
	if err := checkDedup(&c, caps); err != nil {
		return nil, err
	}
	return newEngine(&base{
		cfg: c, log: c.Logger.With("component", "idem.engine"), store: st, tr: tr, caps: caps,
		trace: newTracing(c.Tracer, caps.describe), retry: backoff.Policy{Base: c.RetryBase, Max: c.RetryMax},
	}), nil
}

// newEngine assembles the parts around b.
func newEngine(b *base) *Engine {
	cnt := &counters{}
	var obs observers
	if b.cfg.Observe != nil { // told before the counters count the unit of work
		obs = append(obs, observeFunc{fn: b.cfg.Observe, now: b.cfg.Clock})
	}
	hb := newHeartbeat(b)
	b.shares = newShares(b, hb.id)
	b.health = &health{queue: b.caps.queue}
	obs = append(obs, cnt, hb, b.health)
	if b.cfg.Tracer != nil {
		obs = append(obs, tracerObserver{})
	}
	b.obs = obs
	reg := newRegistry(b.cfg.MaxKeyLen)
	emit := emitter{reg: reg, maxBody: b.cfg.MaxBodyBytes}
	plan := &planner{base: b, reg: reg}
	e := &Engine{
		base: b, reg: reg, counters: cnt,
		plan:    plan,
		units:   &units{base: b, plan: plan, emit: emit, settle: &settler{base: b}, slots: make(chan struct{}, b.cfg.Lanes)},
		relay:   &relay{base: b},
		timers:  &timerPoller{base: b},
		sweeper: &sweeper{base: b, forgetAfter: forgetDeclarationsAfter(&b.cfg)},
		firer:   &scheduleFirer{base: b},
		replays: &replays{base: b},
		beat:    hb,
	}
	return e
}

// fitBodyLimit keeps Config.MaxBodyBytes within what the transport carries
// (limit; 0: no limit): a saga's emission over the transport's limit would
// stay in the outbox forever, failing every relay of its batch. The
// default is lowered to the transport's limit; a value the user set above
// it is refused.
func fitBodyLimit(c *Config, given *Config, limit int) error {
	if limit <= 0 || c.MaxBodyBytes <= limit {
		return nil
	}
	if given != nil && given.MaxBodyBytes != 0 {
		return fmt.Errorf("idem: Config.MaxBodyBytes is %d but the transport carries bodies of at most %d bytes: set MaxBodyBytes to %d or less, or raise the broker's limit (NATS: max_payload)",
			c.MaxBodyBytes, limit, limit)
	}
	c.MaxBodyBytes = limit
	return nil
}

// Register adds a saga machine. Every message type the machine consumes
// must not be consumed by another machine or handler of this engine.
// Problems reported by m.Validate are logged as warnings. Register fails
// after Start.
func (e *Engine) Register(m Machine) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return ErrRunning
	}
	return e.reg.register(m, e.log)
}

// Handle registers fn as the consumer of messages of type msgType (see
// saga.MessageType for type names). Handle fails after Start.
func (e *Engine) Handle(msgType string, fn HandlerFunc) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return ErrRunning
	}
	return e.reg.handle(msgType, fn)
}

// NewEnvelope is the package-level NewEnvelope plus the envelope's
// CorrelationID, computed by the registered machine that consumes msg.
func (e *Engine) NewEnvelope(id string, msg any) (Envelope, error) {
	env, err := NewEnvelope(id, msg)
	if err != nil {
		return env, err
	}
	e.mu.Lock()
	m, ok := e.reg.machine(env.Type)
	e.mu.Unlock()
	if ok { // the machine's code runs without the lock
		env.CorrelationID = correlationID(m, msg, e.cfg.MaxKeyLen)
	}
	return env, nil
}

// Start runs the start-up checks in order (startcheck.go: the registry,
// the store's pool, its units of work, the declared limits, the
// schedules, the saga definitions), then launches the consumer loops, the outbox relay, the
// timer poller and the sweeper, and returns. They run until Stop or until
// ctx is cancelled. A check that warns is logged; one that refuses stops
// Start with a *StartCheckError that names it and says what to change.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return ErrStopped
	}
	if e.started {
		return ErrRunning
	}
	su := &startup{base: e.base, reg: e.reg, plan: e.plan, replicaID: e.beat.id}
	if err := runStartChecks(ctx, startChecks(), su); err != nil {
		return err
	}
	claim, adm := su.claim, su.adm
	e.beat.definitions = su.definitions
	e.started = true
	workCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	loopCtx, stop := context.WithCancel(ctx)
	e.stop, e.abort = stop, abort
	e.done = make(chan struct{})
	// One group context: a loop that fails stops every other loop, and its
	// error reaches Stop, Done's readers (Err) and Ready.
	g, loopCtx := errgroup.WithContext(loopCtx)
	e.units.order = keyOrderFor(&e.cfg, e.caps)
	beside := adm.besideBroker(e.units)
	if adm != nil && adm.q != nil {
		// Admission receives from the whole queue (ReceiveAdmitted): this
		// replica takes no share, and says so in its heartbeats.
		e.shares = nil
	}
	services := e.services()
	if e.shares != nil {
		e.shares.join(loopCtx, e.beat)
	}
	for _, c := range consumers(e.base, e.plan, e.units, claim, adm) {
		g.Go(func() error { return c.run(loopCtx, workCtx) })
	}
	if adm != nil {
		services = append(services, newLimitsPoller(e.base, adm))
	}
	if adm != nil && len(adm.decl) > 0 {
		services = append(services, newLimitsDeclarer(e.base, adm))
	}
	services = append(services, beside...)
	for _, s := range services {
		g.Go(func() error { return s.run(loopCtx) })
	}
	go e.wait(g, e.done)
	return nil
}

// service is a background loop the engine runs in its errgroup from Start
// to Stop, as River's maintenance services are: run returns when ctx
// ends, or with the error that stops the engine.
type service interface {
	run(ctx context.Context) error
}

// services are the engine's background services: the timer poller (with
// the schedule firer when a schedule is registered), the sweeper, and the
// outbox relay unless emissions go to the store's own queue.
func (e *Engine) services() []service {
	if len(e.reg.schedules) > 0 {
		e.timers.schedules = e.firer
	}
	e.beat.reg = e.reg
	out := []service{e.timers, e.sweeper, e.beat}
	if e.shares != nil {
		out = append(out, e.shares)
	}
	if !e.caps.queue {
		out = append(out, e.relay)
	}
	return out
}

// wait waits for the engine's loops, then records how they ended and
// closes done.
func (e *Engine) wait(g *errgroup.Group, done chan struct{}) {
	err := g.Wait()
	if err != nil {
		e.log.Error("engine stopped by a failed loop", "error", err)
	}
	e.stop()
	e.abort()
	e.mu.Lock()
	e.runErr = err
	e.mu.Unlock()
	close(done)
}

// Run starts the engine, blocks until ctx ends or a background loop fails
// (the transport was closed, say), then stops it, giving the batch in
// flight up to Config.StopTimeout to finish. It returns nil when ctx ended
// and the engine stopped cleanly, the failed loop's error, or an error
// wrapping context.DeadlineExceeded when the batch in flight did not finish
// in time (its deliveries are handed out again).
func (e *Engine) Run(ctx context.Context) error {
	if err := e.Start(context.WithoutCancel(ctx)); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-e.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.StopTimeout)
	defer cancel()
	if err := e.Stop(sctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("idem: the engine did not stop within Config.StopTimeout (%s); unfinished deliveries will be handed out again: %w", e.cfg.StopTimeout, err)
		}
		return err
	}
	return nil
}

// Ready reports whether the engine is consuming: nil while it runs, an
// error saying it has not started, or why it stopped. While it runs, it
// also fails, with an error wrapping store.ErrReadOnly, from the moment the
// store refused a write because its database server is no longer the
// primary (after a failover) until a write lands again: a unit of work's
// commit, a heartbeat (every Config.HeartbeatInterval), or on the store's
// own queue a receive.
func (e *Engine) Ready() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case !e.started:
		return errors.New("idem: the engine has not started")
	case e.stopped:
		return errors.New("idem: the engine was stopped")
	}
	select {
	case <-e.done:
		if e.runErr != nil {
			return fmt.Errorf("idem: the engine stopped: %w", e.runErr)
		}
		return errors.New("idem: the engine stopped")
	default:
		return e.health.err()
	}
}

// Stop stops receiving, lets the batch in flight finish (commit, ack and
// publish), and waits for every goroutine. If ctx ends first, in-flight
// work is cancelled: its deliveries are not acknowledged and the transport
// hands them out again. Stop is idempotent; it returns the error that
// stopped the engine, if any, or ctx's error.
func (e *Engine) Stop(ctx context.Context) error {
	e.mu.Lock()
	if !e.started {
		e.mu.Unlock()
		return nil
	}
	e.stopped = true
	e.stop()
	done := e.done
	e.mu.Unlock()
	select {
	case <-done:
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.runErr
	case <-ctx.Done():
		e.abort()
		<-done
		return ctx.Err()
	}
}

// Done returns a channel closed when the engine has stopped; nil before
// Start.
func (e *Engine) Done() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done
}

// RunTimers fires every due timer once; the background poller calls it
// every Config.TimerInterval. It returns how many fired.
func (e *Engine) RunTimers(ctx context.Context) (int, error) { return e.timers.pass(ctx) }

// RelayOutbox sends outbox messages that stayed unsent longer than age
// (their engine crashed after committing) and returns how many it sent.
// The background relay calls it every Config.RelayInterval with
// Config.RelayAge.
func (e *Engine) RelayOutbox(ctx context.Context, age time.Duration) (int, error) {
	return e.relay.pass(ctx, age)
}

// Sweep deletes finished sagas older than Config.Retention (with their
// inbox records, timers and journal), handler inbox records older than
// Config.Retention, and sent outbox rows older than
// Config.OutboxRetention, in batches of Config.SweepBatch, until nothing
// is left to delete; then, when the store can, unclaimed dedup tokens
// past Config.TokenRetention, retries past Config.Retention, and the
// flow-control counters no decision needs (idle for
// Config.LimitCounterIdle) with expired holds, and the limits'
// declarations no running engine refreshed for max(LimitCounterIdle,
// 10 × store.DeclarationRefresh). The background sweeper calls it every
// Config.SweepInterval.
func (e *Engine) Sweep(ctx context.Context) (store.SweepResult, error) { return e.sweeper.pass(ctx) }

// RunSchedules fires every due schedule once, by the rules of Cron and
// SkipMissed, and returns how many ticks it fired (messages published; a
// tick skipped by SkipMissed advances its schedule and is not counted).
// The timer poller calls it every Config.TimerInterval on engines that
// registered a schedule. It fires every due schedule of the store, also
// those this engine did not register: a tick's message is built from the
// stored row alone. A tick another replica claimed first is left to it; a
// row this engine cannot plan is left as it is.
func (e *Engine) RunSchedules(ctx context.Context) (int, error) { return e.firer.pass(ctx) }

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats { return e.counters.stats() }

// TypeStats returns a snapshot of the engine's counters by saga type. It
// is safe for concurrent use; each type's counters are read one by one,
// so a snapshot taken during a commit may hold part of it.
func (e *Engine) TypeStats() map[string]TypeStats { return e.counters.typeStats() }

// Config returns the configuration the engine runs with: the one given to
// NewEngine with every default filled in.
func (e *Engine) Config() Config { return e.cfg }

// Sagas returns the registered machines by saga type (Sagas()[name] for
// one): a copy, which the caller may keep and change. It is safe for
// concurrent use.
func (e *Engine) Sagas() map[string]Machine {
	e.mu.Lock()
	defer e.mu.Unlock()
	return maps.Clone(e.reg.sagas)
}

// The engine's transport and plain handlers, for admin
// (engineaccess.Transport, engineaccess.Handled); not part of the user's
// API.
func init() {
	engineaccess.TransportOf = func(e any) transport.Transport { return e.(*Engine).tr }
	engineaccess.HandledOf = func(e any) []string {
		en := e.(*Engine)
		en.mu.Lock()
		defer en.mu.Unlock()
		return slices.Sorted(maps.Keys(en.reg.handlers))
	}
}

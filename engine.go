package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/internal/canon"
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
type Engine struct {
	cfg      Config
	log      *slog.Logger
	store    store.Store
	tr       transport.Transport
	queue    bool // the transport is the store's own queue
	claimTx  bool // consumers may claim inside units of work (claimtx.go)
	retry    backoff.Policy
	machines map[string]Machine // by message type
	sagas    map[string]Machine // by saga type
	handlers map[string]HandlerFunc
	// schedules registered with Every and Cron, saved at Start (see schedule.go)
	schedules []*scheduleDef
	unplanned unplanned // stored schedules the poller cannot plan (see schedule.go)
	// replayer keeps dead letters' replay history; nil: a replay deletes
	// the dead letter (see replay.go).
	replayer store.DeadLetterReplayer

	mu      sync.Mutex
	started bool
	stopped bool
	stop    context.CancelFunc // stops receiving and the background loops
	abort   context.CancelFunc // cancels in-flight work
	group   *errgroup.Group
	done    chan struct{}
	runErr  error

	stats  stats
	byType sync.Map      // saga type → *typeCounters
	order  *keyOrder     // set by Start when several consumers share one stream
	slots  chan struct{} // one per unit of work open at once (Config.Lanes)
	trace  tracing       // traces sends (trace.go)
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
	if _, ok := st.(store.SingleWriter); ok && (cfg == nil || cfg.Consumers == 0) {
		c.Consumers = 1
	}
	e := &Engine{
		cfg:      c,
		log:      c.Logger.With("component", "idem.engine"),
		store:    st,
		tr:       tr,
		retry:    backoff.Policy{Base: c.RetryBase, Max: c.RetryMax},
		machines: map[string]Machine{},
		sagas:    map[string]Machine{},
		handlers: map[string]HandlerFunc{},
		slots:    make(chan struct{}, c.Lanes),
		trace:    newTracing(c.Tracer, tr),
	}
	e.replayer, _ = st.(store.DeadLetterReplayer)
	if err := fitBodyLimit(&e.cfg, cfg, tr); err != nil {
		return nil, err
	}
	if err := checkDedup(&e.cfg, st); err != nil {
		return nil, err
	}
	if q, ok := st.(store.Queue); ok && reflect.TypeOf(q).Comparable() && reflect.TypeOf(tr).Comparable() && any(q) == any(tr) {
		e.queue = true
	}
	return e, nil
}

// fitBodyLimit keeps Config.MaxBodyBytes within what the transport carries:
// a saga's emission over the transport's limit would stay in the outbox
// forever, failing every relay of its batch. The default is lowered to the
// transport's limit; a value the user set above it is refused.
func fitBodyLimit(c *Config, given *Config, tr transport.Transport) error {
	l, ok := tr.(transport.SizeLimiter)
	if !ok || l.MaxMessageBytes() <= 0 || c.MaxBodyBytes <= l.MaxMessageBytes() {
		return nil
	}
	if given != nil && given.MaxBodyBytes != 0 {
		return fmt.Errorf("idem: Config.MaxBodyBytes is %d but the transport carries bodies of at most %d bytes: set MaxBodyBytes to %d or less, or raise the broker's limit (NATS: max_payload)",
			c.MaxBodyBytes, l.MaxMessageBytes(), l.MaxMessageBytes())
	}
	c.MaxBodyBytes = l.MaxMessageBytes()
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
	if _, dup := e.sagas[m.Name()]; dup {
		return fmt.Errorf("idem: register saga %s: saga type already registered", m.Name())
	}
	types := m.MessageTypes()
	if len(types) == 0 {
		return fmt.Errorf("idem: register saga %s: it binds no message type: bind events with saga.NewEvent", m.Name())
	}
	for _, t := range types {
		if err := e.claimType(t); err != nil {
			return fmt.Errorf("idem: register saga %s: %w", m.Name(), err)
		}
	}
	for _, t := range types {
		e.machines[t] = m
	}
	e.sagas[m.Name()] = m
	if err := m.Validate(); err != nil {
		e.log.Warn("saga machine is incomplete", logSagaType, m.Name(), "problems", err.Error())
	}
	return nil
}

// Handle registers fn as the consumer of messages of type msgType (see
// saga.MessageType for type names). Handle fails after Start.
func (e *Engine) Handle(msgType string, fn HandlerFunc) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.started {
		return ErrRunning
	}
	if err := e.claimType(msgType); err != nil {
		return fmt.Errorf("idem: handle: %w", err)
	}
	e.handlers[msgType] = fn
	return nil
}

func (e *Engine) claimType(t string) error {
	if m, ok := e.machines[t]; ok {
		return fmt.Errorf("message type %s already consumed by saga %s", t, m.Name())
	}
	if _, ok := e.handlers[t]; ok {
		return fmt.Errorf("message type %s already has a handler", t)
	}
	return nil
}

// Machine returns the registered machine for saga type name.
func (e *Engine) Machine(name string) (Machine, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	m, ok := e.sagas[name]
	return m, ok
}

// NewEnvelope is the package-level NewEnvelope plus the envelope's
// CorrelationID, computed by the registered machine that consumes msg.
func (e *Engine) NewEnvelope(id string, msg any) (Envelope, error) {
	env, err := NewEnvelope(id, msg)
	if err != nil {
		return env, err
	}
	e.mu.Lock()
	m, ok := e.machines[env.Type]
	e.mu.Unlock()
	if ok {
		env.CorrelationID = e.correlationID(m, msg)
	}
	return env, nil
}

// Publish hands envelopes to the transport. Each needs an ID and a type;
// SentAt is set when zero, and CorrelationID when empty and a saga of this
// engine consumes the type (on copies: the caller's envelopes are not
// modified). An envelope with the header transport.HeaderToken is refused:
// use PublishWithTokens, which mints the token the header promises.
func (e *Engine) Publish(ctx context.Context, envs ...Envelope) error {
	envs = slices.Clone(envs)
	for i := range envs {
		if err := checkPublish(i, &envs[i]); err != nil {
			return err
		}
		if _, ok := envs[i].Headers[transport.HeaderToken]; ok {
			return fmt.Errorf("idem: publish envelope %d: %w: header %s is only set by PublishWithTokens (without a minted token the consumer would drop the message as a duplicate)", i, ErrInvalidEnvelope, transport.HeaderToken)
		}
		e.correlate(&envs[i])
	}
	return e.publish(ctx, envs)
}

// correlate sets an envelope's empty CorrelationID to the canonical key a
// saga of this engine correlates its body to, so that partitions follow
// the key. A body that does not decode, or has no valid key, is left
// alone: its consumer dead-letters it with the reason.
func (e *Engine) correlate(env *Envelope) {
	if env.CorrelationID != "" {
		return
	}
	e.mu.Lock()
	m, ok := e.machines[env.Type]
	e.mu.Unlock()
	if !ok {
		return
	}
	_, raw, err := m.Decode(env.Type, env.Body)
	if err != nil {
		return
	}
	if key, err := canon.Key(raw, e.cfg.MaxKeyLen); err == nil {
		env.CorrelationID = key
	}
}

func checkPublish(i int, env *Envelope) error {
	if env.ID == "" || env.Type == "" {
		return fmt.Errorf("idem: publish envelope %d (id %q, type %q): %w: ID and type are required", i, env.ID, env.Type, ErrInvalidEnvelope)
	}
	if err := transport.ValidateEnvelope(env); err != nil {
		return fmt.Errorf("idem: publish envelope %d: %w: %w", i, ErrInvalidEnvelope, err)
	}
	return nil
}

// publish sets SentAt where zero on envs (the caller's copies) and hands
// them to the transport, each in a send span when sends are traced.
func (e *Engine) publish(ctx context.Context, envs []Envelope) error {
	now := e.cfg.Clock()
	for i := range envs {
		if envs[i].SentAt.IsZero() {
			envs[i].SentAt = now
		}
	}
	spans := e.trace.startPublish(ctx, envs)
	err := e.tr.Publish(ctx, envs)
	spans.end(err)
	if err != nil {
		return fmt.Errorf("idem: publish %d messages: %w", len(envs), err)
	}
	return nil
}

// Start launches the consumer loop, the outbox relay, the timer poller and
// the sweeper, and returns. They run until Stop or until ctx is cancelled.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return ErrStopped
	}
	if e.started {
		return ErrRunning
	}
	if len(e.machines) == 0 && len(e.handlers) == 0 && len(e.schedules) == 0 {
		return errors.New("idem: start: nothing registered: call Register or Handle first")
	}
	if err := checkPool(e.store, e.cfg, e.queue); err != nil {
		return err
	}
	if e.queue {
		// The queue path settles deliveries inside the unit of work; a store
		// whose units of work cannot do that would leave the outbox unsent.
		uow, err := e.store.Begin(ctx)
		if err != nil {
			return fmt.Errorf("idem: start: %w", err)
		}
		_, ok := uow.(store.QueueUnitOfWork)
		e.claimTx = e.claimsInTx(uow)
		_ = uow.Rollback(ctx)
		if !ok {
			return fmt.Errorf("idem: start: store %T is a store.Queue but its units of work are not store.QueueUnitOfWork", e.store)
		}
	}
	if err := e.saveSchedules(ctx); err != nil {
		return err
	}
	e.started = true
	workCtx, abort := context.WithCancel(context.WithoutCancel(ctx))
	loopCtx, stop := context.WithCancel(ctx)
	e.stop, e.abort = stop, abort
	e.done = make(chan struct{})
	// One group context: a loop that fails stops every other loop, and its
	// error reaches Stop, Done's readers (Err) and Ready.
	g, loopCtx := errgroup.WithContext(loopCtx)
	e.group = g
	e.startConsumers(g, loopCtx, workCtx)
	g.Go(func() error { e.every(loopCtx, e.cfg.TimerInterval, e.fireDue); return nil })
	g.Go(func() error { e.every(loopCtx, e.cfg.SweepInterval, e.sweep); return nil })
	if !e.queue {
		g.Go(func() error { e.every(loopCtx, e.cfg.RelayInterval, e.relay); return nil })
	}
	done := e.done
	go func() {
		err := g.Wait()
		if err != nil {
			e.log.Error("engine stopped by a failed loop", "error", err)
		}
		stop()
		abort()
		e.mu.Lock()
		e.runErr = err
		e.mu.Unlock()
		close(done)
	}()
	return nil
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
// error saying it has not started, or why it stopped.
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
		return nil
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
		return e.err()
	case <-ctx.Done():
		e.abort()
		<-done
		return ctx.Err()
	}
}

func (e *Engine) err() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.runErr
}

// Done returns a channel closed when the engine has stopped.
func (e *Engine) Done() <-chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done
}

// consume receives and processes batches until loopCtx ends. With claim
// (see claimtx.go), it claims inside units of work while batches come back
// full, and receives otherwise.
func (e *Engine) consume(loopCtx, workCtx context.Context, receive func(context.Context, int) ([]transport.Delivery, error), claim func(context.Context) int) error {
	backlog := false
	for {
		if backlog && claim != nil && loopCtx.Err() == nil && claim(workCtx) == e.cfg.BatchSize {
			continue
		}
		ds, err := receive(loopCtx, e.fetchSize())
		backlog = len(ds) == e.fetchSize()
		if len(ds) > 0 {
			e.process(workCtx, ds)
		}
		if stop, ferr := e.received(loopCtx, err); stop {
			return ferr
		}
	}
}

// startConsumers starts Config.Consumers consumer loops in g: on
// partitions of the keys with Config.PartitionedReceive, otherwise taking
// turns on one stream under the engine's key order (one consumer needs
// none).
func (e *Engine) startConsumers(g *errgroup.Group, loopCtx, workCtx context.Context) {
	n := e.cfg.Consumers
	if pc, ok := e.tr.(transport.PartitionedConsumer); ok && e.cfg.PartitionedReceive && n > 1 {
		for part := range n {
			receive := func(ctx context.Context, max int) ([]transport.Delivery, error) {
				return pc.ReceivePartition(ctx, max, part, n)
			}
			g.Go(func() error { return e.consume(loopCtx, workCtx, receive, e.claimer(part, n)) })
		}
		return
	}
	if n == 1 {
		g.Go(func() error { return e.consume(loopCtx, workCtx, e.tr.Receive, e.claimer(0, 1)) })
		return
	}
	e.order = newKeyOrder()
	for range n {
		g.Go(func() error { return e.consumeOrdered(loopCtx, workCtx, e.tr.Receive) })
	}
}

// received decides what a consumer does after a receive whose deliveries
// (if any) it has processed: stop (with the error that ends the engine,
// if any), or receive again, after a pause when the receive failed.
func (e *Engine) received(loopCtx context.Context, err error) (stop bool, fatal error) {
	switch {
	case loopCtx.Err() != nil:
		return true, nil
	case err == nil:
		return false, nil
	case errors.Is(err, transport.ErrClosed):
		return true, fmt.Errorf("idem: consume: %w", err)
	}
	e.log.Error("receive failed", "error", err)
	return !sleepCtx(loopCtx, e.retry.Delay(1)), nil
}

func (e *Engine) every(ctx context.Context, d time.Duration, fn func(context.Context)) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			fn(ctx)
		}
	}
}

// RunTimers fires every due timer once; the background poller calls it
// every Config.TimerInterval. It returns how many fired.
func (e *Engine) RunTimers(ctx context.Context) (total int, err error) {
	ctx, end := e.background(ctx, TaskTimers)
	defer func() { end(total, err) }()
	for {
		ts, err := e.store.ClaimTimers(ctx, &store.ClaimParams{Now: e.cfg.Clock(), Limit: e.cfg.BatchSize, Lease: e.cfg.ClaimLease})
		if err != nil || len(ts) == 0 {
			return total, err
		}
		envs := make([]Envelope, len(ts))
		for i, t := range ts {
			envs[i] = t.Envelope
		}
		if err := e.tr.Publish(ctx, envs); err != nil {
			return total, fmt.Errorf("publish %d timers: %w", len(envs), err)
		}
		if err := e.store.DeleteTimers(ctx, ts); err != nil {
			return total, fmt.Errorf("delete %d fired timers: %w", len(ts), err)
		}
		total += len(ts)
		e.stats.timersFired.Add(int64(len(ts)))
		if len(ts) < e.cfg.BatchSize {
			return total, nil
		}
	}
}

func (e *Engine) fireTimers(ctx context.Context) {
	if _, err := e.RunTimers(ctx); err != nil && ctx.Err() == nil {
		e.log.Error("fire timers", "error", err)
	}
}

// RelayOutbox sends outbox messages that stayed unsent longer than
// Config.RelayAge (their engine crashed after committing) and returns how
// many it sent. The background relay calls it every Config.RelayInterval.
func (e *Engine) RelayOutbox(ctx context.Context, age time.Duration) (total int, err error) {
	ctx, end := e.background(ctx, TaskRelay)
	defer func() { end(total, err) }()
	for {
		now := e.cfg.Clock()
		before := now.Add(-age)
		if age == 0 {
			before = now.Add(time.Nanosecond) // everything, including rows created now
		}
		ms, err := e.store.ClaimOutbox(ctx, &store.ClaimParams{Now: now, Limit: e.cfg.BatchSize, Lease: e.cfg.ClaimLease, CreatedBefore: before})
		if err != nil || len(ms) == 0 {
			return total, err
		}
		envs := make([]Envelope, len(ms))
		ids := make([]string, len(ms))
		for i, m := range ms {
			envs[i], ids[i] = m.Envelope, m.Envelope.ID
		}
		if err := e.tr.Publish(ctx, envs); errors.Is(err, transport.ErrTooLarge) {
			// One message the transport can never carry must not hold back
			// the others of its batch on every pass.
			if ids, err = e.relayOneByOne(ctx, ms); err != nil {
				return total, err
			}
		} else if err != nil {
			return total, fmt.Errorf("relay %d outbox messages: %w", len(envs), err)
		}
		if err := e.store.MarkSent(ctx, ids, e.cfg.Clock()); err != nil {
			return total, fmt.Errorf("mark %d relayed messages sent: %w", len(ids), err)
		}
		total += len(ms)
		e.stats.relayed.Add(int64(len(ms)))
		if len(ms) < e.cfg.BatchSize {
			return total, nil
		}
	}
}

// relayOneByOne publishes ms one at a time, after their batch was refused
// as too large: a message refused again with transport.ErrTooLarge is
// recorded as a dead letter (ReasonUndeliverable) and returned with the
// sent ones, to be marked sent; any other failure stops the relay.
func (e *Engine) relayOneByOne(ctx context.Context, ms []store.OutboxMessage) ([]string, error) {
	var done []string
	var dead []store.DeadLetter
	for _, m := range ms {
		err := e.tr.Publish(ctx, []Envelope{m.Envelope})
		switch {
		case errors.Is(err, transport.ErrTooLarge):
			now := e.cfg.Clock()
			dead = append(dead, store.DeadLetter{
				ID: m.Envelope.ID, Envelope: m.Envelope, Reason: ReasonUndeliverable, Error: err.Error(),
				SagaType: m.Envelope.Headers[transport.HeaderSagaType], Key: m.Envelope.Headers[transport.HeaderSagaKey],
				Attempts: 1, FirstFailedAt: now, LastFailedAt: now,
			})
		case err != nil:
			if derr := e.recordUndeliverable(ctx, dead); derr != nil {
				return nil, derr
			}
			return nil, fmt.Errorf("relay outbox message %s: %w", m.Envelope.ID, err)
		}
		done = append(done, m.Envelope.ID)
	}
	if err := e.recordUndeliverable(ctx, dead); err != nil {
		return nil, err
	}
	return done, nil
}

// recordUndeliverable stores the dead letters of messages the transport
// refused, before their outbox rows are marked sent.
func (e *Engine) recordUndeliverable(ctx context.Context, dead []store.DeadLetter) error {
	if len(dead) == 0 {
		return nil
	}
	uow, err := e.store.Begin(ctx)
	if err != nil {
		return fmt.Errorf("record %d undeliverable messages: %w", len(dead), err)
	}
	if err := uow.Commit(ctx, &store.Changes{DeadLetters: dead}); err != nil {
		_ = uow.Rollback(ctx)
		return fmt.Errorf("record %d undeliverable messages: %w", len(dead), err)
	}
	for _, d := range dead {
		e.log.Error("outbox message undeliverable: dead-lettered", logMessageID, d.ID, "message_type", d.Envelope.Type, "error", d.Error)
	}
	e.stats.deadLettered.Add(int64(len(dead)))
	return nil
}

func (e *Engine) relay(ctx context.Context) {
	if _, err := e.RelayOutbox(ctx, e.cfg.RelayAge); err != nil && ctx.Err() == nil {
		e.log.Error("relay outbox", "error", err)
	}
}

// Sweep deletes finished sagas older than Config.Retention (with their
// inbox records, timers and journal), handler inbox records older than
// Config.Retention, and sent outbox rows older than Config.OutboxRetention, in batches of Config.SweepBatch,
// until nothing is left to delete. The background sweeper calls it every
// Config.SweepInterval.
func (e *Engine) Sweep(ctx context.Context) (total store.SweepResult, err error) {
	ctx, end := e.background(ctx, TaskSweep)
	defer func() { end(total.Instances+total.Inbox+total.Outbox, err) }()
	for {
		now := e.cfg.Clock()
		r, err := e.store.Sweep(ctx, &store.SweepParams{
			FinishedBefore: now.Add(-e.cfg.Retention),
			InboxBefore:    now.Add(-e.cfg.Retention),
			SentBefore:     now.Add(-e.cfg.OutboxRetention),
			Limit:          e.cfg.SweepBatch,
		})
		if err != nil {
			return total, fmt.Errorf("sweep: %w", err)
		}
		total.Instances += r.Instances
		total.Inbox += r.Inbox
		total.Outbox += r.Outbox
		if r.Instances < e.cfg.SweepBatch && r.Inbox < e.cfg.SweepBatch && r.Outbox < e.cfg.SweepBatch {
			e.stats.swept.Add(int64(total.Instances))
			return total, nil
		}
	}
}

func (e *Engine) sweep(ctx context.Context) {
	if _, err := e.Sweep(ctx); err != nil && ctx.Err() == nil {
		e.log.Error("sweep", "error", err)
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Observation describes one committed unit of work (see Config.Observe).
type Observation struct {
	// Messages is how many deliveries the unit of work settled.
	Messages int
	// Applied is how many of them ran a transition or a handler.
	Applied int
	// Duration is the time from Begin to the end of the commit.
	Duration time.Duration
	// Conflicts is how many times the unit of work was re-applied first.
	Conflicts int
	// SagaTypes lists the distinct saga types of its messages
	// ("idem.handler" for plain handlers, "" for messages refused before
	// their saga was known).
	SagaTypes []string
}

// Stats are cumulative counters of one engine since it was created.
type Stats struct {
	// Received counts deliveries taken from the transport.
	Received int64 `json:"received"`
	// Applied counts messages that ran a saga transition or a handler.
	Applied int64 `json:"applied"`
	// Ignored counts messages a saga ignored (including stale timers).
	Ignored int64 `json:"ignored"`
	// Duplicates counts deliveries skipped because the inbox held them.
	Duplicates int64 `json:"duplicates"`
	// NotFound counts messages that found no saga and could not start one.
	NotFound int64 `json:"not_found"`
	// DeadLettered counts messages recorded as dead letters.
	DeadLettered int64 `json:"dead_lettered"`
	// Conflicts counts units of work that lost an optimistic-concurrency
	// race and were re-applied.
	Conflicts int64 `json:"conflicts"`
	// Retries counts deliveries returned to the transport for another try.
	Retries int64 `json:"retries"`
	// StaleTimers counts timer messages dropped because the saga had
	// unscheduled or rescheduled them, and the responses, timeouts and
	// faults of requests that were no longer pending (saga.Request).
	StaleTimers int64 `json:"stale_timers"`
	// Emitted counts messages written to the outbox (or queue).
	Emitted int64 `json:"emitted"`
	// Relayed counts outbox messages sent by the relay.
	Relayed int64 `json:"relayed"`
	// TimersFired counts timers handed to the transport.
	TimersFired int64 `json:"timers_fired"`
	// Swept counts finished sagas deleted by the sweeper.
	Swept int64 `json:"swept"`
}

type stats struct {
	received, applied, ignored, duplicates, notFound, deadLettered atomic.Int64
	conflicts, retries, staleTimers, emitted, relayed, timersFired atomic.Int64
	swept                                                          atomic.Int64
}

// Stats returns a snapshot of the engine's counters.
func (e *Engine) Stats() Stats {
	s := &e.stats
	return Stats{
		Received: s.received.Load(), Applied: s.applied.Load(), Ignored: s.ignored.Load(),
		Duplicates: s.duplicates.Load(), NotFound: s.notFound.Load(), DeadLettered: s.deadLettered.Load(),
		Conflicts: s.conflicts.Load(), Retries: s.retries.Load(), StaleTimers: s.staleTimers.Load(),
		Emitted: s.emitted.Load(), Relayed: s.relayed.Load(), TimersFired: s.timersFired.Load(), Swept: s.swept.Load(),
	}
}

// SumStats adds up the counters of several engines (replicas).
func SumStats(es ...*Engine) Stats {
	var s Stats
	for _, e := range es {
		x := e.Stats()
		s.Received += x.Received
		s.Applied += x.Applied
		s.Ignored += x.Ignored
		s.Duplicates += x.Duplicates
		s.NotFound += x.NotFound
		s.DeadLettered += x.DeadLettered
		s.Conflicts += x.Conflicts
		s.Retries += x.Retries
		s.StaleTimers += x.StaleTimers
		s.Emitted += x.Emitted
		s.Relayed += x.Relayed
		s.TimersFired += x.TimersFired
		s.Swept += x.Swept
	}
	return s
}

// Config returns the configuration the engine runs with: the one given to
// NewEngine with every default filled in.
func (e *Engine) Config() Config { return e.cfg }

// Sagas returns the registered machines by saga type.
func (e *Engine) Sagas() map[string]Machine {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]Machine, len(e.sagas))
	for k, v := range e.sagas {
		out[k] = v
	}
	return out
}

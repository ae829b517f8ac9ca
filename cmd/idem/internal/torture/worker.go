package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/searchimport"
	"github.com/idemhq/idem/internal/countersaga"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// WorkerEnv is the environment variable that carries a worker's
// configuration (JSON) from the driver to a worker process. A process that
// finds it set must call RunWorkerFromEnv.
const WorkerEnv = "IDEM_TORTURE_WORKER"

// TransportOpener opens a broker transport from a --transport spec (a
// broker URL: the driver resolves "nats-embedded" and "nats-cluster" to
// the URLs of the servers it starts) with the run's BrokerOptions; the
// returned func releases what it opened besides the transport. It is the
// seam through which broker transports plug in: the CLI passes its
// broker table's (Options.OpenTransport, RunWorkerFromEnv), and a run
// with a transport spec and no opener is refused.
//
// The driver counts the broker's backlog through the transport it opens,
// which must be a transport.PendingCounter, and deletes the run's
// namespace after a passing run when it has a DeleteNamespace method (see
// NamespaceDeleter).
type TransportOpener func(ctx context.Context, spec string, o BrokerOptions) (transport.Transport, func(), error)

// BrokerOptions are what a run asks of its TransportOpener.
type BrokerOptions struct {
	// Namespace is the run's own stream (NATS) or namespace (RabbitMQ):
	// letters, digits and '_', fresh for each run, so that nothing left by
	// another run or application is counted or delivered.
	Namespace string
	// Lease is the workers' lease: the broker's visibility timeout
	// (natsjs.Config.AckWait, rabbitmq.Config.Lease), so that a stalled
	// worker's deliveries are handed to another one and its late
	// settlement is fenced.
	Lease time.Duration
	// Logger receives the transport's logs (the run discards them).
	Logger *slog.Logger
	// Replicas is the JetStream stream's replica count (3 on
	// TransportCluster); zero means the transport's default.
	Replicas int
}

// NamespaceDeleter is a broker transport that can delete its namespace
// (stream, queues) with every message in it.
type NamespaceDeleter interface {
	DeleteNamespace(ctx context.Context) error
}

// workerConfig is what the driver tells a worker process.
type workerConfig struct {
	Store     string        `json:"store"`               // sqlite file path or postgres URL
	Schema    string        `json:"schema,omitempty"`    // PostgreSQL schema
	Transport string        `json:"transport,omitempty"` // a broker URL (never nats-embedded)
	Namespace string        `json:"namespace,omitempty"` // the broker namespace of the run
	Replicas  int           `json:"replicas,omitempty"`  // the JetStream stream's replicas
	Lease     time.Duration `json:"lease"`
	// Probabilities, per unit of work, of the in-process faults.
	KillAfterCommit float64 `json:"kill_after_commit"`
	KillInUoW       float64 `json:"kill_in_uow"`
	Stall           float64 `json:"stall"`
	// KillAtLoad, when above 0, kills the worker in its KillAtLoad-th
	// unit of work, before its commit, whatever the dice say: a breakage
	// that shows only when a crash lands there is then always shown.
	KillAtLoad int `json:"kill_at_load,omitempty"`
	// Probabilities, per schedule pass that found a due schedule, of a
	// kill after it read the schedules and before its commit, and right
	// after its commit (before the ticks in the outbox are sent).
	KillInSchedulePass    float64 `json:"kill_in_schedule_pass"`
	KillAfterScheduleFire float64 `json:"kill_after_schedule_fire"`
	// Break names a deliberate breakage (tests of the checker only).
	Break    string `json:"break,omitempty"`
	FaultLog string `json:"fault_log"`
	Seed     uint64 `json:"seed"`
	// Limits declares the limits run's limits (runLimits), and FlowLog is
	// then the file of the worker's flow log.
	Limits  bool   `json:"limits,omitempty"`
	FlowLog string `json:"flow_log,omitempty"`
	// Roll marks a roll run (roll.go): Def is the definition the worker
	// runs (defA or defB), and MaxAttempts its Config.MaxAttempts.
	Roll        bool   `json:"roll,omitempty"`
	Def         string `json:"def,omitempty"`
	MaxAttempts int    `json:"max_attempts,omitempty"`
}

// Fault names written to the fault log by workers and counted by the
// driver.
const (
	faultKillAfterCommit = "kill_after_commit"
	faultKillInUoW       = "kill_before_commit"
	faultStall           = "lease_expiry_stall"
	faultRenewedStall    = "renewed_stall"
	faultKillInSchedule  = "kill_in_schedule_pass"
	faultKillAfterFire   = "kill_after_schedule_fire"
)

// Deliberate breakages of the engine's guarantees, built as wrappers around
// the store and the transport (the engine is untouched). They exist to show
// that the checker can fail.
const (
	// BreakSkipInbox hides inbox records from the engine's load: every
	// duplicate is applied again.
	BreakSkipInbox = "skip-inbox"
	// BreakAckBeforeCommit acknowledges each delivery as soon as it is
	// received: a crash before the commit loses it.
	BreakAckBeforeCommit = "ack-before-commit"
	// BreakNoAdmission, in a limits run, asks the store's admitting
	// receive for no counter: every message is admitted at once, and
	// the caps and the rate are exceeded.
	BreakNoAdmission = "no-admission"
)

// workerRetryMax is the workers' Config.RetryMax: the longest a message
// given back waits for its next delivery.
const workerRetryMax = 500 * time.Millisecond

// workerMaxBody is the workers' Config.MaxBodyBytes; the workload's
// oversized message exceeds it.
const workerMaxBody = 64 << 10

// RunWorkerFromEnv is the body of a worker process: it reads its
// configuration from WorkerEnv, runs an engine with the torture's sagas
// until SIGTERM, and returns the process exit code. open opens the broker
// of a run with a transport (the driver's Options.OpenTransport).
func RunWorkerFromEnv(open TransportOpener) int {
	var c workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(WorkerEnv)), &c); err != nil {
		fmt.Fprintln(os.Stderr, "torture worker: bad", WorkerEnv, ":", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := runWorker(ctx, c, open); err != nil {
		fmt.Fprintln(os.Stderr, "torture worker:", err)
		return 1
	}
	return 0
}

func runWorker(ctx context.Context, c workerConfig, open TransportOpener) error {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, tr, closeAll, err := openRetry(ctx, c, open, logger)
	if err != nil {
		return err
	}
	defer closeAll()
	f := &faults{cfg: c, rng: rand.New(rand.NewPCG(c.Seed, uint64(os.Getpid())))}
	if c.Limits {
		if f.flow, err = openFlowLog(c.FlowLog); err != nil {
			return err
		}
	}
	wst, wtr := wrap(st, tr, f)
	cfg := &idem.Config{
		Logger: rollLogger(logger, f), BatchSize: 16, MaxBodyBytes: workerMaxBody,
		RetryBase: 20 * time.Millisecond, RetryMax: workerRetryMax, MaxAttempts: c.MaxAttempts,
		TimerInterval: 50 * time.Millisecond, RelayInterval: 200 * time.Millisecond, RelayAge: time.Second,
		ClaimLease: c.Lease,
		Observe: func(o idem.Observation) {
			if o.Applied > 0 && f.roll(c.KillAfterCommit) {
				// Committed, not yet acknowledged nor published.
				f.die(faultKillAfterCommit)
			}
		},
	}
	if c.Limits {
		// The tenants' messages carry their fairness key: on the store's
		// own queue they share the caps in fair order (the engine refuses
		// FairShare beside a broker, which keeps its own order).
		cfg.Limits, cfg.FairShare = runLimits(), c.Transport == ""
	}
	e, err := idem.NewEngine(wst, wtr, cfg)
	if err != nil {
		return err
	}
	if err := registerAll(e, c.Def); err != nil {
		return err
	}
	return e.Run(ctx)
}

// openRetry opens a worker's store and transport, with retryOpen.
func openRetry(ctx context.Context, c workerConfig, open TransportOpener, logger *slog.Logger) (store.Store, transport.Transport, func(), error) {
	b := &backend{store: c.Store, schema: c.Schema, transport: c.Transport, open: open, worker: true,
		bo: BrokerOptions{Namespace: c.Namespace, Lease: c.Lease, Replicas: c.Replicas}}
	return retryOpen(ctx, func() (store.Store, transport.Transport, func(), error) { return b.openWith(ctx, logger) })
}

// retryOpen retries open for up to a minute while a server is restarting
// (a worker started during a broker restart fails to connect; so does the
// driver when another test restarts a shared broker), as a supervisor
// restarting a service would.
func retryOpen(ctx context.Context, open func() (store.Store, transport.Transport, func(), error)) (store.Store, transport.Transport, func(), error) {
	deadline := time.Now().Add(time.Minute)
	for {
		st, tr, closeAll, err := open()
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return st, tr, closeAll, err
		}
		select {
		case <-ctx.Done():
			return nil, nil, nil, ctx.Err()
		case <-time.After(250 * time.Millisecond): // the server is coming back
		}
	}
}

// registerAll registers the torture's sagas (of definition def), the
// handlers that stand in for downstream services, and the run's
// schedules on e.
func registerAll(e *idem.Engine, def string) error {
	if err := registerMachines(e, def); err != nil {
		return err
	}
	if err := registerSchedules(e, runSchedules); err != nil {
		return err
	}
	// The consumer of the counter's events: its inbox records each one.
	if err := e.Handle(saga.MessageType(countersaga.Added{}), func(context.Context, idem.Envelope) error { return nil }); err != nil {
		return err
	}
	return e.Handle(saga.MessageType(searchimport.StartParsingReferenceFile{}), parser(e))
}

// uploadTimeout is long enough never to fire during a run: the upload
// timers are there to be cancelled, and replayed late by the driver.
const uploadTimeout = 30 * time.Minute

// parser answers each parse command (at least once: twice), failing the
// first file of the searches the workload marks as faulty.
func parser(e *idem.Engine) idem.HandlerFunc {
	return func(ctx context.Context, env idem.Envelope) error {
		var cmd searchimport.StartParsingReferenceFile
		if err := json.Unmarshal(env.Body, &cmd); err != nil {
			return idem.Permanent(err)
		}
		var reply any = searchimport.ReferenceFileParsingCompleted(cmd)
		if searchFaults(cmd.SearchID) && cmd.File == searchFile(0) {
			reply = searchimport.ReferenceFileFaulted{SearchID: cmd.SearchID, File: cmd.File, Error: "unsupported encoding"}
		}
		out, err := idem.NewEnvelope(replyID(env.ID), reply)
		if err != nil {
			return idem.Permanent(err)
		}
		return e.Publish(ctx, out, out.Clone())
	}
}

func replyID(cmdID string) string { return "parsed-" + cmdID }

// faults injects the in-process faults of one worker.
type faults struct {
	cfg   workerConfig
	mu    sync.Mutex
	rng   *rand.Rand
	acked sync.Map     // delivery tokens acknowledged at receive (BreakAckBeforeCommit)
	loads atomic.Int64 // units of work loaded (KillAtLoad)
	// starved ends the withholding of lease renewals by a stall, and
	// stalled a stall whose renewals pass; guarded by mu.
	starved, stalled time.Time
	// flow is the flow log of a limits run; nil otherwise.
	flow *flowLog
}

// starve withholds this process's lease renewals for d from now.
func (f *faults) starve(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if until := time.Now().Add(d); until.After(f.starved) {
		f.starved = until
	}
}

// renewing marks a stall of d from now whose leases are renewed; the
// first renewal sent in it notes faultRenewedStall (renewed).
func (f *faults) renewing(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stalled = time.Now().Add(d)
}

// renewed notes a stall whose leases a renewal kept, once per stall.
func (f *faults) renewed() {
	f.mu.Lock()
	in := time.Now().Before(f.stalled)
	f.stalled = time.Time{}
	f.mu.Unlock()
	if in {
		f.note(faultRenewedStall)
	}
}

// starving reports whether lease renewals are withheld now.
func (f *faults) starving() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Now().Before(f.starved)
}

func (f *faults) roll(p float64) bool {
	if p <= 0 {
		return false
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.Float64() < p
}

// nthLoad counts a unit of work's load and reports whether it is the
// n-th of this process (n > 0).
func (f *faults) nthLoad(n int) bool {
	return n > 0 && f.loads.Add(1) == int64(n)
}

// note appends a fault to the fault log the driver counts.
func (f *faults) note(name string) {
	if f.cfg.FaultLog == "" {
		return
	}
	fl, err := os.OpenFile(f.cfg.FaultLog, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return
	}
	_, _ = fl.WriteString(name + "\n")
	_ = fl.Sync()
	_ = fl.Close()
}

// die records the fault and kills this process with SIGKILL: no deferred
// function, no flush, no graceful anything.
func (f *faults) die(name string) {
	f.note(name)
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// wrap puts the fault injection (and a deliberate breakage, if any) around
// the store and transport. When the store is its own queue the result is
// one value, so the engine still settles deliveries inside each unit of
// work.
//
// A transport whose leases the engine renews (transport.LeaseExtender)
// stays one through the wrapper, so that the engine renews the leases of
// slow batches here as in production; a stalled worker withholds its
// renewals for half of its stalls (see renewer), and the others are
// counted when a renewal goes through during them.
func wrap(st store.Store, tr transport.Transport, f *faults) (store.Store, transport.Transport) {
	ext, leased := tr.(transport.LeaseExtender)
	if q, ok := st.(store.Queue); ok && any(q) == any(tr) {
		w := &faultQueue{faultStore: faultStore{Store: q, f: f}, q: q}
		if leased {
			lw := &leasedQueue{faultQueue: w, renewer: renewer{ext: ext, faults: f}}
			return lw, lw
		}
		return w, w
	}
	w := &faultTransport{Transport: tr, f: f}
	if leased {
		return &faultStore{Store: st, f: f}, &leasedTransport{faultTransport: w, renewer: renewer{ext: ext, faults: f}}
	}
	return &faultStore{Store: st, f: f}, w
}

// renewer passes the engine's lease renewals through to the wrapped
// transport, except while a stalled worker withholds them (faults.starve):
// then the stalled batch's leases run out and its commit must be fenced.
type renewer struct {
	ext    transport.LeaseExtender
	faults *faults
}

// errRenewalWithheld is the error of a renewal a stalled worker withholds.
var errRenewalWithheld = errors.New("torture: lease renewal withheld by a stalled worker")

// LeaseDuration is the wrapped transport's.
func (r renewer) LeaseDuration() time.Duration { return r.ext.LeaseDuration() }

// ExtendLeases renews the leases of ds, unless a stall withholds renewals.
func (r renewer) ExtendLeases(ctx context.Context, ds []transport.Delivery) error {
	if r.faults.starving() {
		return errRenewalWithheld
	}
	err := r.ext.ExtendLeases(ctx, ds)
	if err == nil {
		r.faults.renewed()
	}
	return err
}

// leasedQueue is a faultQueue over a store whose queue leases can be
// renewed.
type leasedQueue struct {
	*faultQueue
	renewer
}

// leasedTransport is a faultTransport over a broker whose leases can be
// renewed.
type leasedTransport struct {
	*faultTransport
	renewer
}

// faultStore wraps a store: its units of work stall or crash the process
// between load and commit, and with BreakSkipInbox forget the inbox.
type faultStore struct {
	store.Store
	f *faults
}

// The schedules of the wrapped store (a store.Scheduler: both SQL stores).

func (s *faultStore) scheduler() store.Scheduler { return s.Store.(store.Scheduler) }

func (s *faultStore) SaveSchedule(ctx context.Context, sc *store.Schedule) error {
	return s.scheduler().SaveSchedule(ctx, sc)
}
func (s *faultStore) ListSchedules(ctx context.Context, p *store.ListParams) ([]store.Schedule, error) {
	return s.scheduler().ListSchedules(ctx, p)
}
func (s *faultStore) GetSchedule(ctx context.Context, name string) (*store.Schedule, error) {
	return s.scheduler().GetSchedule(ctx, name)
}
func (s *faultStore) PauseSchedule(ctx context.Context, name string, paused bool, at time.Time) error {
	return s.scheduler().PauseSchedule(ctx, name, paused, at)
}
func (s *faultStore) DeleteSchedule(ctx context.Context, name string) error {
	return s.scheduler().DeleteSchedule(ctx, name)
}

func (s *faultStore) Begin(ctx context.Context) (store.UnitOfWork, error) {
	u, err := s.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	if q, ok := u.(store.QueueUnitOfWork); ok {
		return &faultQueueUoW{faultUoW: faultUoW{UnitOfWork: u, f: s.f}, q: q}, nil
	}
	return &faultUoW{UnitOfWork: u, f: s.f}, nil
}

type faultUoW struct {
	store.UnitOfWork
	f     *faults
	fires bool // a schedule pass that advances schedules
	// held are the tokens of the admitted deliveries it consumes, which
	// its commit releases (a limits run).
	held []string
}

// DueSchedules reads the due schedules, then may kill the process before
// the pass commits.
func (u *faultUoW) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.Schedule, error) {
	su, ok := u.UnitOfWork.(store.ScheduleUnitOfWork)
	if !ok {
		return nil, fmt.Errorf("torture: %T keeps no schedules", u.UnitOfWork)
	}
	due, err := su.DueSchedules(ctx, now, limit)
	if err == nil && len(due) > 0 && u.f.roll(u.f.cfg.KillInSchedulePass) {
		u.f.die(faultKillInSchedule)
	}
	return due, err
}

func (u *faultUoW) AdvanceSchedules(ctx context.Context, as []store.ScheduleAdvance) error {
	su, ok := u.UnitOfWork.(store.ScheduleUnitOfWork)
	if !ok {
		return fmt.Errorf("torture: %T keeps no schedules", u.UnitOfWork)
	}
	u.fires = len(as) > 0
	return su.AdvanceSchedules(ctx, as)
}

// Commit commits, then may kill a schedule pass's process before it sends
// the ticks it wrote to the outbox. In a limits run it notes the
// settlement of the deliveries it consumed (the store's own queue) and
// the release of the holds it names (beside a broker).
func (u *faultUoW) Commit(ctx context.Context, c *store.Changes) error {
	var rel int64
	if u.f.flow != nil {
		u.f.flow.settle(u.held, "commit")
		if c != nil {
			rel = u.f.flow.release(c.ReleaseHolds, "commit")
		}
	}
	err := u.UnitOfWork.Commit(ctx, c)
	if u.f.flow != nil {
		u.f.flow.settled(u.held, "commit", err)
		u.f.flow.released(rel, err)
	}
	if err == nil && u.fires && u.f.roll(u.f.cfg.KillAfterScheduleFire) {
		u.f.die(faultKillAfterFire)
	}
	return err
}

func (u *faultUoW) Load(ctx context.Context, p *store.LoadParams) (*store.LoadResult, error) {
	r, err := u.UnitOfWork.Load(ctx, p)
	if err != nil {
		return r, err
	}
	if u.f.cfg.Break == BreakSkipInbox {
		r.Seen = map[store.InboxKey]bool{}
	}
	if u.f.roll(u.f.cfg.KillInUoW) || u.f.nthLoad(u.f.cfg.KillAtLoad) {
		u.f.die(faultKillInUoW)
	}
	if u.f.roll(u.f.cfg.Stall) {
		// A slow worker, past its lease. In half of the stalls it
		// withholds its lease renewals: its deliveries' lease expires
		// before it commits, so another worker takes them; this commit
		// must then be fenced (lease lost) or lose the version race. In
		// the others the engine renews the leases and the batch commits.
		stall := u.f.cfg.Lease + u.f.cfg.Lease/2
		if u.f.roll(0.5) {
			u.f.starve(stall)
			u.f.note(faultStall)
		} else {
			u.f.renewing(stall) // noted by the first renewal sent in it
		}
		select {
		case <-time.After(stall):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return r, nil
}

type faultQueueUoW struct {
	faultUoW
	q store.QueueUnitOfWork
}

func (u *faultQueueUoW) Consume(ctx context.Context, ds []transport.Delivery) error {
	if u.f.cfg.Break == BreakAckBeforeCommit {
		// Already acknowledged at receive: settle only the others.
		keep := ds[:0:0]
		for _, d := range ds {
			if _, acked := u.f.acked.Load(d.Token); !acked {
				keep = append(keep, d)
			}
		}
		ds = keep
	}
	if u.f.flow != nil {
		u.held = append(u.held, u.f.flow.heldOf(ds)...)
	}
	return u.q.Consume(ctx, ds)
}

func (u *faultQueueUoW) Enqueue(ctx context.Context, msgs []transport.Envelope) error {
	return u.q.Enqueue(ctx, msgs)
}

// faultQueue is a faultStore over a store that is its own queue; it is
// also the transport.
type faultQueue struct {
	faultStore
	q store.Queue
}

func (w *faultQueue) Publish(ctx context.Context, envs []transport.Envelope) error {
	return w.q.Publish(ctx, envs)
}
func (w *faultQueue) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	return logReceive(w.f.flow, func() ([]transport.Delivery, error) { return receive(ctx, w.q, w.f, max) })
}
func (w *faultQueue) Ack(ctx context.Context, ds []transport.Delivery) error {
	if w.f.flow == nil {
		return w.q.Ack(ctx, ds)
	}
	held := w.f.flow.heldOf(ds)
	w.f.flow.settle(held, "ack")
	err := w.q.Ack(ctx, ds)
	w.f.flow.settled(held, "ack", err)
	return err
}
func (w *faultQueue) Nack(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	if w.f.flow == nil {
		return w.q.Nack(ctx, d, delay)
	}
	held := w.f.flow.heldOf([]transport.Delivery{d})
	w.f.flow.settle(held, "nack")
	err := w.q.Nack(ctx, d, delay)
	w.f.flow.settled(held, "nack", err)
	return err
}
func (w *faultQueue) Close() error { return w.q.Close() }

// faultTransport wraps a separate transport (a broker) for BreakAckBeforeCommit.
type faultTransport struct {
	transport.Transport
	f *faults
}

func (t *faultTransport) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	return receive(ctx, t.Transport, t.f, max)
}

func receive(ctx context.Context, tr transport.Transport, f *faults, max int) ([]transport.Delivery, error) {
	ds, err := tr.Receive(ctx, max)
	if err != nil || f.cfg.Break != BreakAckBeforeCommit || len(ds) == 0 {
		return ds, err
	}
	if err := tr.Ack(ctx, ds); err != nil {
		return nil, err
	}
	for _, d := range ds {
		f.acked.Store(d.Token, true)
	}
	return ds, nil
}

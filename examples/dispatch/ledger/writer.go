package ledger

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// WriterConfig configures a Writer.
type WriterConfig struct {
	// DSN is a postgres:// URL or a SQLite file path. Idem's store and
	// queue and the ledger share it. Required.
	DSN string
	// Schema holds Idem's tables and the ledger on PostgreSQL. Default
	// "dispatch".
	Schema string
	// Name identifies the writer in ledger rows and notifications
	// (informational, never part of an identity). Default "writer".
	Name string
	// StallMin and StallMax, when StallMax > 0, hold this writer back for a
	// random time in [StallMin, StallMax) between loading and committing
	// every unit of work, after its ledger rows are written: the latency
	// spikes of the incident, for tests.
	StallMin, StallMax time.Duration
	// AfterAppend, when set, runs in the saga's transaction after each
	// ledger row and its notification are inserted, before the state
	// change commits (Appender.After): an error fails the message and
	// undoes the rows. Tests inject faults with it.
	AfterAppend func(ctx context.Context, ev Event) error
	// Lease is the queue's visibility timeout: a message claimed by a
	// writer that dies is delivered again after it. Default 30s.
	Lease time.Duration
	// Engine configures the Idem engine; nil means the defaults, except
	// for MaxAttempts: left zero, it is set so that an ordering wait (an
	// event whose predecessor is not applied yet) is retried for at least
	// OrderingWindow(Lease) before it is dead-lettered; set, it must allow
	// that much (OpenWriter refuses less).
	Engine *idem.Config
	// Logger receives the store's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// Writer is one dispatch writer: an Idem engine running the per-patient
// saga, which appends to the ledger in its own transaction, on a shared
// database. Several writers (processes) may run on one database at once.
type Writer struct {
	cfg     WriterConfig
	q       store.Queue
	db      *DB
	machine *Machine
	engine  *idem.Engine
}

// OpenWriter opens Idem's store and the ledger on cfg.DSN, migrating both,
// and builds the engine. Call Start to run it and Close when done.
func OpenWriter(ctx context.Context, cfg WriterConfig) (*Writer, error) {
	if cfg.DSN == "" {
		return nil, errors.New("open writer: no database")
	}
	if cfg.Schema == "" {
		cfg.Schema = "dispatch"
	}
	if cfg.Name == "" {
		cfg.Name = "writer"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	ec, err := engineConfig(cfg.Engine, cfg.Lease)
	if err != nil {
		return nil, fmt.Errorf("open writer: %w", err)
	}
	w := &Writer{cfg: cfg}
	if IsPostgres(cfg.DSN) {
		w.q, err = pgstore.Open(ctx, cfg.DSN, &pgstore.Config{Schema: cfg.Schema, Migrate: true,
			PollInterval: 200 * time.Millisecond, Lease: cfg.Lease, Logger: cfg.Logger})
	} else {
		w.q, err = sqlitestore.Open(ctx, cfg.DSN, &sqlitestore.Config{PollInterval: 50 * time.Millisecond,
			BusyTimeout: 20 * time.Second, Lease: cfg.Lease, Logger: cfg.Logger})
	}
	if err != nil {
		return nil, fmt.Errorf("open writer: %w", err)
	}
	if w.db, err = Open(ctx, cfg.DSN, cfg.Schema); err != nil {
		w.q.Close()
		return nil, fmt.Errorf("open writer: %w", err)
	}
	if err := w.db.Migrate(ctx, Strict); err != nil {
		w.Close(ctx)
		return nil, fmt.Errorf("open writer: %w", err)
	}
	q := w.q
	if cfg.StallMax > 0 {
		q = &stallQueue{Queue: w.q, stall: stallFunc(cfg.StallMin, cfg.StallMax)}
	}
	if w.engine, err = idem.NewEngine(q, q, ec); err != nil {
		w.Close(ctx)
		return nil, fmt.Errorf("open writer: %w", err)
	}
	w.machine = NewMachine(Appender{Schema: cfg.Schema, Writer: cfg.Name, After: cfg.AfterAppend})
	if err := w.engine.Register(w.machine.Machine); err != nil {
		w.Close(ctx)
		return nil, fmt.Errorf("open writer: %w", err)
	}
	return w, nil
}

// Defaults of idem.Config that engineConfig relies on when RetryBase or
// RetryMax is zero.
const (
	defaultRetryBase = 100 * time.Millisecond
	defaultRetryMax  = time.Minute
)

// OrderingWindow is the least time a writer keeps retrying an event that
// waits for its predecessor before dead-lettering it, for a queue lease:
// twice the lease. A predecessor claimed by a writer that crashed is
// invisible for one lease, then delivered again, so a wait behind it ends
// well within the window; only a predecessor that never comes (a gap in
// the producer's sequence numbers, or one dead-lettered)
// dead-letters its successors, after the window.
func OrderingWindow(lease time.Duration) time.Duration { return 2 * lease }

// OrderingAttempts returns the fewest deliveries whose retry delays add up
// to at least window under the engine's backoff with base and max (zero
// meaning Idem's defaults). The engine waits before retry n at least half
// of base·2^(n-1) capped at max (exponential backoff with equal jitter),
// and n deliveries have n-1 waits between them.
func OrderingAttempts(base, max, window time.Duration) int {
	if base <= 0 {
		base = defaultRetryBase
	}
	if max <= 0 {
		max = defaultRetryMax
	}
	n, sum, d := 1, time.Duration(0), min(base, max)
	for sum < window {
		sum += d / 2
		n++
		d = min(2*d, max)
	}
	return n
}

// engineConfig returns the writer's engine configuration: base (nil for the
// defaults) with MaxAttempts sized for OrderingWindow(lease).
func engineConfig(base *idem.Config, lease time.Duration) (*idem.Config, error) {
	var ec idem.Config
	if base != nil {
		ec = *base
	}
	need := OrderingAttempts(ec.RetryBase, ec.RetryMax, OrderingWindow(lease))
	switch {
	case ec.MaxAttempts == 0:
		ec.MaxAttempts = need
	case ec.MaxAttempts < need:
		return nil, fmt.Errorf("Engine.MaxAttempts %d is too few: ordering waits must outlast %s (twice the %s lease), which takes %d attempts with RetryBase %s and RetryMax %s",
			ec.MaxAttempts, OrderingWindow(lease), lease, need, ec.RetryBase, ec.RetryMax)
	}
	return &ec, nil
}

// DB returns the writer's ledger database.
func (w *Writer) DB() *DB { return w.db }

// Engine returns the writer's engine.
func (w *Writer) Engine() *idem.Engine { return w.engine }

// Patient returns the saga of the patient with pseudonym pn as the store
// holds it, nil when there is none.
func (w *Writer) Patient(ctx context.Context, pn string) (*idem.Snapshot[Patient], error) {
	return idem.LoadInstance(ctx, w.q, w.machine.Machine, pn)
}

// Start starts the engine.
func (w *Writer) Start(ctx context.Context) error { return w.engine.Start(ctx) }

// Publish hands events (already pseudonymised) to the queue, each under its
// deterministic identity.
func (w *Writer) Publish(ctx context.Context, evs []Event) error {
	envs := make([]idem.Envelope, 0, len(evs))
	for _, ev := range evs {
		env, err := Envelope(ev)
		if err != nil {
			return err
		}
		envs = append(envs, env)
	}
	if err := w.engine.Publish(ctx, envs...); err != nil {
		return fmt.Errorf("publish: %w", err)
	}
	return nil
}

// Unresolved returns how many of evs are not settled yet. An event is
// settled when the ledger holds its patient's sequence number (this event,
// or another that won the number) or when it was dead-lettered and is not
// being replayed (its latest replay is not pending).
func (w *Writer) Unresolved(ctx context.Context, evs []Event) (int, error) {
	rows, err := w.db.Rows(ctx, Strict)
	if err != nil {
		return 0, err
	}
	type ps struct {
		p string
		s int64
	}
	held := map[ps]bool{}
	for _, r := range rows {
		held[ps{r.Patient, r.Seq}] = true
	}
	dead := map[string]bool{}
	for after := ""; ; {
		dls, err := w.q.ListDeadLetters(ctx, &store.ListParams{After: after, Limit: 500})
		if err != nil {
			return 0, fmt.Errorf("list dead letters: %w", err)
		}
		for _, d := range dls {
			// A dead letter being replayed is not settled yet: the
			// engine has its envelope again (its history says pending).
			if n := len(d.Replays); n == 0 || d.Replays[n-1].Outcome != store.ReplayPending {
				dead[d.Envelope.ID] = true
			}
		}
		if len(dls) < 500 {
			break
		}
		after = dls[len(dls)-1].ID
	}
	n := 0
	for _, ev := range evs {
		if !held[ps{ev.Patient, ev.Seq}] && !dead[ev.ID()] {
			n++
		}
	}
	return n, nil
}

// Wait polls until every event of evs is settled (see Unresolved) or ctx
// ends. Polling is the point: the condition is in the database, written by
// this and other processes.
func (w *Writer) Wait(ctx context.Context, evs []Event) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		n, err := w.Unresolved(ctx, evs)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait: %d of %d events unsettled: %w", n, len(evs), ctx.Err())
		case <-tick.C:
		}
	}
}

// Close stops the engine (finishing the batch in flight) and closes the
// databases.
func (w *Writer) Close(ctx context.Context) error {
	var errs []error
	if w.engine != nil {
		if err := w.engine.Stop(ctx); err != nil && !errors.Is(err, context.Canceled) {
			errs = append(errs, err)
		}
	}
	if w.db != nil {
		errs = append(errs, w.db.Close())
	}
	errs = append(errs, w.q.Close())
	return errors.Join(errs...)
}

func stallFunc(lo, hi time.Duration) func(context.Context) {
	return func(ctx context.Context) {
		d := lo
		if hi > lo {
			d += rand.N(hi - lo)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

// stallQueue holds every unit of work back between its load and its commit:
// the writer of the incident that stalled for 200–900 ms.
type stallQueue struct {
	store.Queue
	stall func(context.Context)
}

func (s *stallQueue) Begin(ctx context.Context) (store.UnitOfWork, error) {
	u, err := s.Queue.Begin(ctx)
	if err != nil {
		return nil, err
	}
	q, ok := u.(domainQueueUoW)
	if !ok {
		u.Rollback(ctx)
		return nil, fmt.Errorf("stall: unit of work %T is not a store.QueueUnitOfWork and a store.DomainTxUnitOfWork", u)
	}
	return &stallUoW{domainQueueUoW: q, stall: s.stall}, nil
}

// domainQueueUoW is what the engine needs of the units of work the stall
// wraps: a queue's, in whose transaction the saga writes the ledger.
type domainQueueUoW interface {
	store.QueueUnitOfWork
	store.DomainTxUnitOfWork
}

type stallUoW struct {
	domainQueueUoW
	stall func(context.Context)
}

func (u *stallUoW) Commit(ctx context.Context, c *store.Changes) error {
	u.stall(ctx)
	return u.domainQueueUoW.Commit(ctx, c)
}

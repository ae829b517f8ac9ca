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
	// every unit of work and every ledger append: the latency spikes of the
	// incident, for tests.
	StallMin, StallMax time.Duration
	// Engine configures the Idem engine; nil means the defaults.
	Engine *idem.Config
	// Logger receives the store's logs. Nil means slog.Default().
	Logger *slog.Logger
}

// Writer is one dispatch writer: an Idem engine running the per-patient saga
// and the ledger handler on a shared database. Several writers (processes)
// may run on one database at once.
type Writer struct {
	cfg    WriterConfig
	q      store.Queue
	db     *DB
	engine *idem.Engine
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
	w := &Writer{cfg: cfg}
	var err error
	if IsPostgres(cfg.DSN) {
		w.q, err = pgstore.Open(ctx, cfg.DSN, &pgstore.Config{Schema: cfg.Schema, Migrate: true, MaxConns: 8,
			PollInterval: 200 * time.Millisecond, Logger: cfg.Logger})
	} else {
		w.q, err = sqlitestore.Open(ctx, cfg.DSN, &sqlitestore.Config{PollInterval: 50 * time.Millisecond,
			BusyTimeout: 20 * time.Second, Logger: cfg.Logger})
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
		stall := stallFunc(cfg.StallMin, cfg.StallMax)
		w.db.Stall = stall
		q = &stallQueue{Queue: w.q, stall: stall}
	}
	if w.engine, err = idem.NewEngine(q, q, cfg.Engine); err != nil {
		w.Close(ctx)
		return nil, fmt.Errorf("open writer: %w", err)
	}
	if err := w.engine.Register(NewMachine().Machine); err != nil {
		w.Close(ctx)
		return nil, fmt.Errorf("open writer: %w", err)
	}
	if err := w.engine.Handle(TypeLedgerAppend, Handler(w.db, cfg.Name)); err != nil {
		w.Close(ctx)
		return nil, fmt.Errorf("open writer: %w", err)
	}
	return w, nil
}

// DB returns the writer's ledger database.
func (w *Writer) DB() *DB { return w.db }

// Engine returns the writer's engine.
func (w *Writer) Engine() *idem.Engine { return w.engine }

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
// or another that won the number) or when it was dead-lettered.
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
			dead[d.Envelope.ID] = true
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
	q, ok := u.(store.QueueUnitOfWork)
	if !ok {
		u.Rollback(ctx)
		return nil, fmt.Errorf("stall: unit of work %T is not a store.QueueUnitOfWork", u)
	}
	return &stallUoW{QueueUnitOfWork: q, stall: s.stall}, nil
}

type stallUoW struct {
	store.QueueUnitOfWork
	stall func(context.Context)
}

func (u *stallUoW) Commit(ctx context.Context, c *store.Changes) error {
	u.stall(ctx)
	return u.QueueUnitOfWork.Commit(ctx, c)
}

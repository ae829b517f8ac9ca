package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/sqlitestore"
)

// SQLiteRun is the cost of one engine configuration on sqlitestore (store
// and queue in one file), on the same workload as the PostgreSQL runs
// (Options.Cost).
type SQLiteRun struct {
	Defaults          bool     `json:"defaults"`
	Batch             int      `json:"batch"`
	Lanes             int      `json:"lanes"`
	Consumers         int      `json:"consumers"`
	Seconds           float64  `json:"seconds"`
	TransitionsPerSec float64  `json:"transitions_per_sec"`
	Applied           int64    `json:"applied"`
	Duplicates        int64    `json:"duplicates_skipped"`
	Cost              *Cost    `json:"cost"`
	Problems          []string `json:"problems,omitempty"`
}

// sqliteCounts counts what the connections of one SQLite file did, from the
// driver's commit and pre-update hooks.
type sqliteCounts struct {
	commits, ins, upd, del atomic.Int64
}

// sqliteHooks routes the driver's connection hook (registered once per
// process) to the counters of the file a connection opens.
var sqliteHooks struct {
	once sync.Once
	mu   sync.Mutex
	by   map[string]*sqliteCounts // by file path
}

// countSQLite counts the commits and row writes of every connection opened
// from now on to the file at path, until the returned function is called.
func countSQLite(path string) (*sqliteCounts, func()) {
	sqliteHooks.once.Do(func() {
		sqliteHooks.by = map[string]*sqliteCounts{}
		sqlite.RegisterConnectionHook(hookSQLite)
	})
	c := &sqliteCounts{}
	sqliteHooks.mu.Lock()
	sqliteHooks.by[path] = c
	sqliteHooks.mu.Unlock()
	return c, func() {
		sqliteHooks.mu.Lock()
		delete(sqliteHooks.by, path)
		sqliteHooks.mu.Unlock()
	}
}

func hookSQLite(conn sqlite.ExecQuerierContext, dsn string) error {
	sqliteHooks.mu.Lock()
	var c *sqliteCounts
	for path, pc := range sqliteHooks.by {
		if strings.Contains(dsn, path) {
			c = pc
		}
	}
	sqliteHooks.mu.Unlock()
	h, ok := conn.(sqlite.HookRegisterer)
	if c == nil || !ok {
		return nil
	}
	h.RegisterCommitHook(func() int32 { c.commits.Add(1); return 0 })
	h.RegisterPreUpdateHook(func(d sqlite.SQLitePreUpdateData) {
		switch d.Op {
		case sqlite3.SQLITE_INSERT:
			c.ins.Add(1)
		case sqlite3.SQLITE_UPDATE:
			c.upd.Add(1)
		case sqlite3.SQLITE_DELETE:
			c.del.Add(1)
		}
	})
	return nil
}

// divertEmittedSQLite is divertEmittedSQL for SQLite: a trigger stores the
// messages the saga emits in a table of the queue's shape instead of the
// queue (RAISE(IGNORE) drops the queue's row), one row each.
const divertEmittedSQLite = `
CREATE TABLE bench_emitted AS SELECT * FROM idem_queue WHERE 0;
CREATE TRIGGER bench_divert_emitted BEFORE INSERT ON idem_queue
WHEN json_extract(NEW.envelope, '$.type') = 'bench.Incremented'
BEGIN
  INSERT INTO bench_emitted (seq, id, envelope, body, visible_at, attempt) VALUES (NULL, NEW.id, NEW.envelope, NEW.body, NEW.visible_at, 0);
  SELECT RAISE(IGNORE);
END;`

// sqliteRuns runs the workload on SQLite for each configuration.
func (r *runner) sqliteRuns(ctx context.Context, configs []EngineRun) ([]SQLiteRun, error) {
	var out []SQLiteRun
	for _, c := range configs {
		run := SQLiteRun{Defaults: c.Defaults, Batch: c.Batch, Lanes: c.Lanes, Consumers: c.Consumers}
		if err := r.sqlite(ctx, &run); err != nil {
			return nil, fmt.Errorf("sqlite %s: %w", configName(c), err)
		}
		r.progress("sqlite %s: %.0f transitions/s, %.2f commits/msg, %.2f rows written/msg",
			configName(EngineRun{Defaults: run.Defaults, Batch: run.Batch, Lanes: run.Lanes, Consumers: run.Consumers}),
			run.TransitionsPerSec, run.Cost.Per(run.Cost.Commits), run.Cost.Per(run.Cost.RowsWritten()))
		out = append(out, run)
	}
	return out, nil
}

// sqlite runs the throughput phase on a fresh SQLite file and counts its
// cost. The file is removed afterwards.
func (r *runner) sqlite(ctx context.Context, run *SQLiteRun) error {
	dir, err := os.MkdirTemp("", "idem-bench-sqlite-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	path := filepath.Join(dir, "bench.db")
	counts, unhook := countSQLite(path)
	defer unhook()
	st, err := sqlitestore.Open(ctx, path, &sqlitestore.Config{
		Logger: slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelError}))})
	if err != nil {
		return err
	}
	defer func() { _ = st.Close() }()
	e, err := r.sqliteEngine(ctx, st, run)
	if err != nil {
		return err
	}
	for chunk := range slices.Chunk(r.w.Envelopes(time.Now()), 1000) {
		if err := st.Publish(ctx, chunk); err != nil {
			return fmt.Errorf("pre-enqueue: %w", err)
		}
	}
	before := counts.snapshot()
	start := time.Now()
	if err := e.Start(ctx); err != nil {
		return err
	}
	werr := r.drain(ctx, e)
	elapsed := time.Since(start)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := e.Stop(sctx); werr == nil {
		werr = err
	}
	if werr != nil {
		return werr
	}
	after := counts.snapshot()
	run.Cost = &Cost{
		Messages: len(r.w.Deliveries), Commits: after.Commits - before.Commits,
		RowsInserted: after.RowsInserted - before.RowsInserted, RowsUpdated: after.RowsUpdated - before.RowsUpdated,
		RowsDeleted: after.RowsDeleted - before.RowsDeleted, Fsyncs: -1,
		Method: "modernc.org/sqlite commit and pre-update hooks; fsyncs not counted by the bench (see docs/benchmarks.md)",
	}
	stats := e.Stats()
	run.Seconds, run.TransitionsPerSec = elapsed.Seconds(), float64(r.w.Distinct)/elapsed.Seconds()
	run.Applied, run.Duplicates = stats.Applied, stats.Duplicates
	if stats.Applied != int64(r.w.Distinct) || stats.Duplicates != int64(r.w.Duplicates()) {
		run.Problems = append(run.Problems, fmt.Sprintf("engine applied %d and skipped %d duplicates, want %d and %d", stats.Applied, stats.Duplicates, r.w.Distinct, r.w.Duplicates()))
	}
	return nil
}

// snapshot reads the counters into a Cost.
func (c *sqliteCounts) snapshot() Cost {
	return Cost{Commits: c.commits.Load(), RowsInserted: c.ins.Load(), RowsUpdated: c.upd.Load(), RowsDeleted: c.del.Load()}
}

// sqliteEngine makes the engine of a SQLite run, with the emitted messages
// diverted out of the queue.
func (r *runner) sqliteEngine(ctx context.Context, st *sqlitestore.Store, run *SQLiteRun) (*idem.Engine, error) {
	if err := divertSQLite(ctx, st.Path()); err != nil {
		return nil, err
	}
	cfg := &idem.Config{Logger: slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelError}))}
	if !run.Defaults {
		cfg.BatchSize, cfg.Lanes, cfg.Consumers = run.Batch, run.Lanes, run.Consumers
	}
	e, err := idem.NewEngine(st, st, cfg)
	if err == nil {
		err = e.Register(Machine())
	}
	if err != nil {
		return nil, err
	}
	got := e.Config()
	run.Batch, run.Lanes, run.Consumers = got.BatchSize, got.Lanes, got.Consumers
	return e, nil
}

// divertSQLite installs divertEmittedSQLite in the file at path, through a
// connection of its own (the store's pick up the new schema).
func divertSQLite(ctx context.Context, path string) error {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer func() { _ = db.Close() }()
	if _, err := db.ExecContext(ctx, divertEmittedSQLite); err != nil {
		return fmt.Errorf("divert emitted messages: %w", err)
	}
	return nil
}

// drainPoll is how often drain looks at the engine's counts.
const drainPoll = 2 * time.Millisecond

// drain waits until the engine has applied or skipped every delivery.
func (r *runner) drain(ctx context.Context, e *idem.Engine) error {
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	tick := time.NewTicker(drainPoll)
	defer tick.Stop()
	for {
		s := e.Stats()
		if s.Applied+s.Duplicates >= int64(len(r.w.Deliveries)) {
			return nil
		}
		select {
		case <-tick.C:
		case <-e.Done():
			return errors.New("the engine stopped before the queue was drained")
		case <-ctx.Done():
			return fmt.Errorf("not drained: %d of %d deliveries done: %w", s.Applied+s.Duplicates, len(r.w.Deliveries), ctx.Err())
		}
	}
}

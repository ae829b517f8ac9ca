package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store/pgstore"
)

// Cost is what the throughput phase of one run asked of the database, in
// totals over Messages deliveries (Options.Cost). The window runs from just
// before the engine starts to just after it stopped, so it holds every
// delivery's unit of work and receive, and the engine's start and stop.
//
// On PostgreSQL, Statements and RoundTrips are counted by the store's pgx
// tracer; Commits (pg_stat_database.xact_commit of the database), the rows
// (pg_stat_user_tables of the run's schema), WALRecords, WALBytes, WALFPI
// and Fsyncs (pg_stat_wal.wal_records, wal_bytes, wal_fpi and wal_sync,
// PostgreSQL 15) are deltas of the
// server's cumulative statistics, read after every idle connection of the
// store ran pg_stat_force_next_flush(), with the bench's own statements
// taken out. Commits and the WAL figures are the whole server's (or
// database's) and include autovacuum and the WAL writer: run it on a server
// with nothing else to do. On SQLite (sqlitestore), every figure comes
// from the driver's hooks and the writer's statements: see sqliteCost.
type Cost struct {
	// Messages is the number of deliveries the totals are divided by.
	Messages int `json:"messages"`
	// Statements is the SQL statements sent (PostgreSQL) or run (SQLite).
	Statements int64 `json:"statements"`
	// RoundTrips is the client-server round trips (0 on SQLite).
	RoundTrips int64 `json:"round_trips"`
	// Commits is the transactions committed, read-only ones included on
	// PostgreSQL; write transactions on SQLite.
	Commits int64 `json:"commits"`
	// RowsInserted, RowsUpdated and RowsDeleted are the rows written.
	RowsInserted int64 `json:"rows_inserted"`
	RowsUpdated  int64 `json:"rows_updated"`
	RowsDeleted  int64 `json:"rows_deleted"`
	// WALRecords is PostgreSQL's WAL records (0 on SQLite).
	WALRecords int64 `json:"wal_records"`
	// WALBytes is the WAL PostgreSQL wrote, full-page images included (0
	// on SQLite): what a larger row costs shows here, not in WALRecords.
	WALBytes int64 `json:"wal_bytes"`
	// WALFPI is the full-page images among WALRecords: the first change
	// of a page after a checkpoint writes the whole page.
	WALFPI int64 `json:"wal_fpi"`
	// Fsyncs is the WAL flushes to disk: pg_stat_wal.wal_sync on
	// PostgreSQL; on SQLite the commits at synchronous=FULL plus two per
	// checkpoint (see sqliteCost).
	Fsyncs int64 `json:"fsyncs"`
	// Method says how Fsyncs and Commits were measured.
	Method string `json:"method"`
}

// RowsWritten is the rows inserted, updated and deleted.
func (c *Cost) RowsWritten() int64 { return c.RowsInserted + c.RowsUpdated + c.RowsDeleted }

// Per returns v per message.
func (c *Cost) Per(v int64) float64 {
	if c == nil || c.Messages == 0 {
		return 0
	}
	return float64(v) / float64(c.Messages)
}

// pgCounters is one reading of the counters of a PostgreSQL store.
type pgCounters struct {
	stmts, trips, commits, ins, upd, del, walRecords, walBytes, walFPI, walSync int64
}

// pgMeter measures the cost of a window of work of one pgstore.Store.
type pgMeter struct {
	st     *pgstore.Store
	before pgCounters
	// own is the bench's transactions counted in the window so far.
	own int64
	// unsettled is set when other backends named idem kept running.
	unsettled bool
}

// startPGCost flushes the statistics of st's idle connections and reads
// the counters: the start of a cost window. It returns nil when the run
// does not measure cost.
func (r *runner) startPGCost(ctx context.Context, st *pgstore.Store) (*pgMeter, error) {
	if !r.o.Cost {
		return nil, nil
	}
	m := &pgMeter{st: st}
	// The backends of the previous run's store publish their last
	// statistics (its DROP SCHEMA) as they exit: wait for them.
	settled, _, err := settle(ctx, st.Pool())
	if err != nil {
		return nil, err
	}
	m.unsettled = !settled
	if _, err := flushStats(ctx, st.Pool()); err != nil {
		return nil, err
	}
	if err := m.read(ctx, &m.before); err != nil {
		return nil, err
	}
	// The reading's transaction, and the flushes that publish it now
	// (rather than on a connection the queue's listener may hold), fall in
	// the window on the server's side.
	n, err := flushStats(ctx, st.Pool())
	if err != nil {
		return nil, err
	}
	m.own = 1 + int64(n)
	m.before.stmts, m.before.trips = st.Statements(), st.RoundTrips()
	return m, nil
}

// finish ends the window and returns the deltas over messages deliveries.
// A nil meter returns nil.
func (m *pgMeter) finish(ctx context.Context, messages int) (*Cost, error) {
	if m == nil {
		return nil, nil
	}
	stmts, trips := m.st.Statements(), m.st.RoundTrips()
	settled, queries, err := settle(ctx, m.st.Pool())
	if err != nil {
		return nil, err
	}
	method := "pgx tracer; pg_stat_database, pg_stat_user_tables, pg_stat_wal deltas"
	if m.unsettled || !settled {
		method += "; UNSETTLED: other backends named idem were running on the server, the server's figures may be off"
	}
	n, err := flushStats(ctx, m.st.Pool())
	if err != nil {
		return nil, err
	}
	var after pgCounters
	if err := m.read(ctx, &after); err != nil {
		return nil, err
	}
	b := m.before
	return &Cost{
		Messages: messages, Statements: stmts - b.stmts, RoundTrips: trips - b.trips,
		// The bench's transactions in the window: the first reading and
		// one pg_stat_force_next_flush() per connection at each end, and
		// settle's queries.
		Commits:      after.commits - b.commits - m.own - queries - int64(n),
		RowsInserted: after.ins - b.ins, RowsUpdated: after.upd - b.upd, RowsDeleted: after.del - b.del,
		WALRecords: after.walRecords - b.walRecords, WALBytes: after.walBytes - b.walBytes, WALFPI: after.walFPI - b.walFPI,
		Fsyncs: after.walSync - b.walSync,
		Method: method,
	}, nil
}

// costCountersSQL reads the server's counters: the database's commits, the
// rows written in the store's schema, and the server's WAL records,
// bytes, full-page images and syncs. It is one statement, so one transaction.
const costCountersSQL = `
SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
       coalesce(sum(n_tup_ins), 0)::bigint, coalesce(sum(n_tup_upd), 0)::bigint, coalesce(sum(n_tup_del), 0)::bigint,
       (SELECT wal_records FROM pg_stat_wal), (SELECT wal_bytes::bigint FROM pg_stat_wal),
       (SELECT wal_fpi FROM pg_stat_wal), (SELECT wal_sync FROM pg_stat_wal)
FROM pg_stat_user_tables WHERE schemaname = $1`

func (m *pgMeter) read(ctx context.Context, c *pgCounters) error {
	err := m.st.Pool().QueryRow(ctx, costCountersSQL, m.st.Schema()).
		Scan(&c.commits, &c.ins, &c.upd, &c.del, &c.walRecords, &c.walBytes, &c.walFPI, &c.walSync)
	if err != nil {
		return fmt.Errorf("cost: read the server's statistics (PostgreSQL 15 or later): %w", err)
	}
	return nil
}

// settle waits until the pool's connections other than the queue
// listener's are idle and no backend of a connection the pool dropped is
// still exiting (a backend publishes its statistics as it exits): then
// flushStats reaches every backend that did the window's work.
// It returns whether that happened within settleTimeout (another process's
// idem backends on the server keep it from happening), and how many
// queries it ran (transactions of the bench).
func settle(ctx context.Context, pool *pgxpool.Pool) (bool, int64, error) {
	wait, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for queries := int64(1); ; queries++ {
		var backends int32
		err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE (application_name = 'idem' OR application_name LIKE 'idem/%') AND datname = current_database()`).Scan(&backends)
		if err != nil {
			return false, 0, fmt.Errorf("cost: wait for the pool to settle: %w", err)
		}
		if ps := pool.Stat(); ps.AcquiredConns() <= 1 && backends <= ps.TotalConns() {
			return true, queries, nil
		}
		select {
		case <-wait.Done():
			return false, queries, ctx.Err()
		case <-tick.C:
		}
	}
}

// settleTimeout bounds settle: on a server that other clients named idem
// share (scripts/test's other packages), it never settles and each window
// waits this long.
var settleTimeout = 10 * time.Second

// flushStats makes every idle connection of pool publish its pending
// statistics: pg_stat_force_next_flush() makes the backend flush them when
// it goes idle after the statement, before it answers. Connections in use
// (the queue's listener) are not flushed. It returns how many it flushed.
func flushStats(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	conns := pool.AcquireAllIdle(ctx)
	defer func() {
		for _, c := range conns {
			c.Release()
		}
	}()
	for _, c := range conns {
		if _, err := c.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
			return 0, fmt.Errorf("cost: flush statistics (PostgreSQL 15 or later): %w", err)
		}
	}
	return len(conns), nil
}

// costName names a run's mode in the cost table.
func costName(transport string) string {
	switch {
	case transport == "":
		return "PostgreSQL store + queue"
	case strings.HasPrefix(transport, "nats"):
		return "PostgreSQL + JetStream (" + transport + ")"
	case strings.HasPrefix(transport, "amqp"), transport == "rabbitmq":
		return "PostgreSQL + RabbitMQ"
	}
	return "PostgreSQL + " + transport
}

// writeCost prints the cost table of a report made with Options.Cost.
func (rep *Report) writeCost(p *errWriter) {
	if len(rep.SQLite) == 0 && !slices.ContainsFunc(rep.Runs, func(r EngineRun) bool { return r.Cost != nil }) {
		return
	}
	p.printf("\nCost per message (delivery) of the throughput phase: statements and round trips from the client; commits, rows and\n")
	p.printf("WAL from PostgreSQL's statistics (server-wide: commits and fsyncs include autovacuum and the WAL writer);\n")
	p.printf("SQLite from the driver's commit and pre-update hooks (fsyncs: see docs/benchmarks.md)\n\n")
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tconfig\tbatch\tlanes\tconsumers\tstatements\tround trips\tcommits\trows written (ins/upd/del)\tWAL records\tWAL bytes (FPI)\tfsyncs\t")
	for _, r := range rep.Runs {
		if c := r.Cost; c != nil {
			mode := costName(r.Transport) + traceMark(r)
			if strings.Contains(c.Method, "UNSETTLED") {
				mode += " (UNSETTLED: another idem on the server)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", mode, configLabel(r), r.Batch, r.Lanes, r.Consumers, costCells(c))
		}
	}
	for _, r := range rep.SQLite {
		cfg := configLabel(EngineRun{Defaults: r.Defaults})
		fmt.Fprintf(tw, "SQLite store + queue\t%s\t%d\t%d\t%d\t%s\n", cfg, r.Batch, r.Lanes, r.Consumers, costCells(r.Cost))
	}
	_ = tw.Flush()
}

// traceMark marks traced and token runs in the cost table.
func traceMark(r EngineRun) string {
	s := ""
	if r.Traced {
		s += " +trace"
	}
	if r.token() {
		s += " +token"
	}
	return s
}

// costCells formats a cost's per-message columns; "-" where not measured.
func costCells(c *Cost) string {
	dash := func(v int64, ok bool) string {
		if !ok {
			return "-"
		}
		return fmt.Sprintf("%.3f", c.Per(v))
	}
	sqlite := c.RoundTrips == 0 && c.Statements == 0
	walBytes := "-"
	if !sqlite {
		walBytes = fmt.Sprintf("%.0f (%.3f)", c.Per(c.WALBytes), c.Per(c.WALFPI))
	}
	return fmt.Sprintf("%s\t%s\t%.3f\t%.3f (%.2f/%.2f/%.2f)\t%s\t%s\t%s\t",
		dash(c.Statements, !sqlite), dash(c.RoundTrips, !sqlite), c.Per(c.Commits),
		c.Per(c.RowsWritten()), c.Per(c.RowsInserted), c.Per(c.RowsUpdated), c.Per(c.RowsDeleted),
		dash(c.WALRecords, !sqlite), walBytes, dash(c.Fsyncs, c.Fsyncs >= 0))
}

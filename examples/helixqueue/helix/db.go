package helix

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// The tables of the example, next to the engine's own (PostgreSQL: in the
// store's schema; SQLite: in its file). helix_audit has one row per
// transition; helix_assignments one row per assignment, of which at most
// one per batch is active (outcome NULL), which a unique partial index
// enforces as well as the saga's state; helix_results one row per
// completed batch, the "processed" effect.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS helix_audit (
		id %s,
		sample_key TEXT NOT NULL,
		raw_sample TEXT NOT NULL,
		message_id TEXT NOT NULL UNIQUE,
		from_state TEXT NOT NULL,
		to_state TEXT NOT NULL,
		worker TEXT NOT NULL,
		attempt INTEGER NOT NULL,
		reason TEXT NOT NULL,
		at_us BIGINT NOT NULL)`,
	`CREATE INDEX IF NOT EXISTS helix_audit_sample ON helix_audit (sample_key, id)`,
	`CREATE TABLE IF NOT EXISTS helix_assignments (
		sample_key TEXT NOT NULL,
		attempt INTEGER NOT NULL,
		worker TEXT NOT NULL,
		state TEXT NOT NULL,
		outcome TEXT,
		PRIMARY KEY (sample_key, attempt))`,
	`CREATE UNIQUE INDEX IF NOT EXISTS helix_one_active_assignment ON helix_assignments (sample_key) WHERE outcome IS NULL`,
	`CREATE TABLE IF NOT EXISTS helix_results (
		sample_key TEXT PRIMARY KEY,
		worker TEXT NOT NULL,
		attempt INTEGER NOT NULL,
		result TEXT NOT NULL)`,
}

// DB is the example's read side and schema owner, on the store's database.
type DB struct {
	*sql.DB
	sqlite bool
}

// openDB opens the example's tables on the store's database, SQLite when
// dsn is a path, PostgreSQL (in schema) when it is a postgres:// URL. It
// creates them if needed when create is set; otherwise their absence is
// ErrNoStore.
func openDB(ctx context.Context, dsn, schemaName string, create bool) (*DB, error) {
	db := &DB{}
	if isPostgres(dsn) {
		cc, err := pgx.ParseConfig(dsn)
		if err != nil {
			return nil, fmt.Errorf("helixqueue: parse %q: %w", redactURL(dsn), err)
		}
		cc.RuntimeParams["search_path"] = pgstore.SearchPath(schemaName)
		db.DB = stdlib.OpenDB(*cc)
	} else {
		// The store opened the file first and put it in WAL mode (see
		// sqlitestore.SetWAL), which lasts: no journal_mode pragma here.
		d, err := sql.Open("sqlite", "file:"+dsn+"?_pragma=busy_timeout(10000)")
		if err != nil {
			return nil, fmt.Errorf("helixqueue: open %s: %w", dsn, err)
		}
		db.DB, db.sqlite = d, true
	}
	if !create {
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM helix_audit WHERE 1 = 0`).Scan(&n); err != nil {
			db.Close()
			return nil, fmt.Errorf("%w (%v)", ErrNoStore, err)
		}
		return db, nil
	}
	id := "BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"
	if db.sqlite {
		id = "INTEGER PRIMARY KEY"
	}
	for i, q := range schema {
		if i == 0 {
			q = fmt.Sprintf(q, id)
		}
		if _, err := db.ExecContext(ctx, q); err != nil {
			db.Close()
			return nil, fmt.Errorf("helixqueue: create tables: %w", err)
		}
	}
	return db, nil
}

func isPostgres(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// redactURL drops the password of a URL for error messages.
func redactURL(u string) string {
	if at := strings.LastIndex(u, "@"); at > 0 {
		if i := strings.Index(u, "://"); i > 0 && i < at {
			return u[:i+3] + "…" + u[at:]
		}
	}
	return u
}

// q rewrites $n placeholders for SQLite (?n).
func (db *DB) q(query string) string {
	if db.sqlite {
		return strings.ReplaceAll(query, "$", "?")
	}
	return query
}

// domainTx runs statements in the unit of work's transaction.
type domainTx interface {
	// exec runs a statement and returns the number of rows it changed.
	exec(ctx context.Context, query string, args ...any) (int64, error)
	// count runs a query that returns one number.
	count(ctx context.Context, query string, args ...any) (int64, error)
}

// errNoDomainTx is returned on a store without domain statements (memstore).
var errNoDomainTx = errors.New("helixqueue needs a SQLite or PostgreSQL store: its audit rows are written in the saga's transaction")

// pgTx is the unit of work's transaction on PostgreSQL.
type pgTx struct{ tx pgstore.DBTX }

func (t pgTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, query, args...)
	return tag.RowsAffected(), err
}

func (t pgTx) count(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = t.tx.QueryRow(ctx, query, args...).Scan(&n)
	return n, err
}

// sqliteTx is the unit of work's transaction on SQLite ($n becomes ?n).
type sqliteTx struct{ tx sqlitestore.DBTX }

func (t sqliteTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	res, err := t.tx.ExecContext(ctx, strings.ReplaceAll(query, "$", "?"), args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqliteTx) count(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = t.tx.QueryRowContext(ctx, strings.ReplaceAll(query, "$", "?"), args...).Scan(&n)
	return n, err
}

// domainExec is the accessor of the unit of work's transaction on either
// store.
func domainExec(c *saga.Context[Batch]) (domainTx, error) {
	if tx, ok := pgstore.TxFrom(c); ok {
		return pgTx{tx}, nil
	}
	if tx, ok := sqlitestore.TxFrom(c); ok {
		return sqliteTx{tx}, nil
	}
	return nil, permanent(errNoDomainTx)
}

// transition is one state change to record.
type transition struct {
	to     string
	raw    string  // the message's raw sample ID
	reason string  // why, for the audit row
	result *string // a completed batch's result
}

// writer writes a transition's rows.
type writer struct {
	fault  string
	before func(ctx context.Context, to string) error
	log    *slog.Logger
}

// transition writes the audit row of c's transition to t.to, then the
// assignment table, in the unit of work's transaction.
func (w writer) transition(c *saga.Context[Batch], t transition) error {
	ctx := c.Context()
	if w.before != nil {
		if err := w.before(ctx, t.to); err != nil {
			return err
		}
	}
	tx, err := domainExec(c)
	if err != nil {
		return err
	}
	from := string(c.Current())
	if c.Current() == saga.Initial {
		from = ""
	}
	if _, err := tx.exec(ctx, `INSERT INTO helix_audit (sample_key, raw_sample, message_id, from_state, to_state, worker, attempt, reason, at_us)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
		c.Key(), t.raw, c.MessageID(), from, t.to, c.Data.Worker, c.Data.Attempt, t.reason, c.Now().UnixMicro()); err != nil {
		return fmt.Errorf("audit %s %s→%s: %w", c.Key(), from, t.to, err)
	}
	if w.fault != "" && w.fault == t.to {
		_, err := tx.exec(ctx, `INSERT INTO helix_no_such_table (x) VALUES (1)`)
		return permanent(fmt.Errorf("%s→%s: %w: %w", from, t.to, ErrFault, err))
	}
	if err := w.assignmentRows(ctx, tx, c, t); err != nil {
		return fmt.Errorf("assignment %s %s→%s: %w", c.Key(), from, t.to, err)
	}
	return nil
}

// assignmentRows keeps helix_assignments (and helix_results) in step.
func (w writer) assignmentRows(ctx context.Context, tx domainTx, c *saga.Context[Batch], t transition) error {
	k, a := c.Key(), c.Data.Attempt
	exec := func(query string, args ...any) error {
		_, err := tx.exec(ctx, query, args...)
		return err
	}
	switch {
	case t.to == Assigned:
		n, err := tx.exec(ctx, `INSERT INTO helix_assignments (sample_key, attempt, worker, state) VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING`, k, a, c.Data.Worker, Assigned)
		if err != nil || n == 1 {
			return err
		}
		return w.lostRace(ctx, tx, c)
	case t.to == Running:
		return exec(`UPDATE helix_assignments SET state = $1 WHERE sample_key = $2 AND attempt = $3`, Running, k, a)
	case t.to == Pending && c.Current() != saga.Initial:
		return exec(`UPDATE helix_assignments SET outcome = $1 WHERE sample_key = $2 AND attempt = $3`, t.reason, k, a)
	case t.to == Completed:
		if err := exec(`UPDATE helix_assignments SET state = $1, outcome = $1 WHERE sample_key = $2 AND attempt = $3`, Completed, k, a); err != nil {
			return err
		}
		return exec(`INSERT INTO helix_results (sample_key, worker, attempt, result) VALUES ($1, $2, $3, $4)`, k, c.Data.Worker, a, *t.result)
	case t.to == Failed:
		return exec(`UPDATE helix_assignments SET state = $1, outcome = $1 WHERE sample_key = $2 AND attempt = $3`, Failed, k, a)
	}
	return nil
}

// ErrActiveAssignment is wrapped by the error of an Assign that found
// another active assignment of its batch that no concurrent Assign
// explains (a row written outside the saga). It is permanent: the message
// is dead-lettered, and the batch stays PENDING.
var ErrActiveAssignment = errors.New("the batch already has an active assignment")

// lostRace handles an Assign whose assignment row the unique index kept
// out: another assignment of the batch is active. When it is the
// ASSIGNED of another assigner, committed meanwhile, of this same attempt,
// both read the batch PENDING and that one committed first: the expected
// outcome of the race the README describes, logged at INFO, not an error.
// This unit of work then fails the engine's version check (the winner
// changed the saga), so nothing of it lands; the engine applies the Assign
// again, and in ASSIGNED ignores it. Any other active assignment is an
// error (ErrActiveAssignment): the index stands for the saga's state.
func (w writer) lostRace(ctx context.Context, tx domainTx, c *saga.Context[Batch]) error {
	n, err := tx.count(ctx, `SELECT COUNT(*) FROM helix_audit
		WHERE sample_key = $1 AND attempt = $2 AND to_state = 'ASSIGNED' AND message_id <> $3`, c.Key(), c.Data.Attempt, c.MessageID())
	if err != nil {
		return fmt.Errorf("assignment %s: %w", c.Key(), err)
	}
	if n == 0 {
		return permanent(fmt.Errorf("assignment %s attempt %d: %w", c.Key(), c.Data.Attempt, ErrActiveAssignment))
	}
	w.log.InfoContext(ctx, "assigner lost the race: another Assign of this attempt committed first (the expected outcome with concurrent assigners); this one is retried and then ignored",
		"saga_key", c.Key(), "attempt", c.Data.Attempt, "worker", c.Data.Worker, "message_id", c.MessageID())
	return nil
}

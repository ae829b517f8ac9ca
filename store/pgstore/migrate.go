package pgstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/internal/sqlq"
)

// MigrateLockTimeout bounds each wait of a migration for a lock (the
// session's lock_timeout): a migration that cannot get one in time, because
// a long transaction or busy writers hold the table, fails and leaves the
// schema at its previous version instead of queueing every writer behind
// its wait.
const MigrateLockTimeout = 5 * time.Second

// outsideMarker starts the part of a migration file run after its
// transaction commits, one statement at a time: CREATE INDEX CONCURRENTLY
// IF NOT EXISTS statements (an invalid index an interrupted run left is
// dropped and built again) and statements marked with repeatMarker, run
// again until they change no row (a backfill in batches). Statements are
// separated by a semicolon at the end of a line.
const (
	outsideMarker = "-- idem:outside-transaction"
	repeatMarker  = "-- idem:repeat"
)

// concurrentIndex matches a statement of the outside part that builds an
// index, and names it.
var concurrentIndex = regexp.MustCompile(`(?is)^CREATE\s+(?:UNIQUE\s+)?INDEX\s+(CONCURRENTLY)\s+IF\s+NOT\s+EXISTS\s+([a-z_][a-z0-9_]*)\s+ON\s+([a-z_][a-z0-9_]*)\s`)

// concurrentAbove is the size of a table from which its indexes are built
// concurrently. A concurrent build waits for every transaction of the
// database older than it to end, whatever it touches; a small table's
// index is built at once, holding off its writers for as long.
const concurrentAbove = 8 << 20

// migration is one migration file: the statements of its transaction, and
// those run after it.
type migration struct {
	name    string
	tx      string
	outside []outsideStmt
}

// outsideStmt is one statement run outside the transaction: an index
// (its name, its table, and the statement without CONCURRENTLY) or a
// repeated statement.
type outsideStmt struct {
	sql    string
	index  string
	table  string
	plain  string
	repeat bool
}

// parseMigration splits a migration file at outsideMarker.
func parseMigration(name, body string) (migration, error) {
	m := migration{name: name, tx: body}
	i := strings.Index(body, "\n"+outsideMarker+"\n")
	if i < 0 {
		return m, nil
	}
	m.tx = body[:i+1]
	for _, part := range strings.Split(body[i+len(outsideMarker)+2:], ";\n") {
		var st outsideStmt
		var lines []string
		for _, l := range strings.Split(part, "\n") {
			switch t := strings.TrimSpace(l); {
			case t == repeatMarker:
				st.repeat = true
			case strings.HasPrefix(t, "--"), t == "":
			default:
				lines = append(lines, l)
			}
		}
		st.sql = strings.TrimSuffix(strings.TrimSpace(strings.Join(lines, "\n")), ";")
		if st.sql == "" {
			continue
		}
		if g := concurrentIndex.FindStringSubmatchIndex(st.sql); g != nil && !st.repeat {
			st.index, st.table = strings.ToLower(st.sql[g[4]:g[5]]), strings.ToLower(st.sql[g[6]:g[7]])
			st.plain = st.sql[:g[2]] + st.sql[g[3]:]
		} else if !st.repeat {
			return m, fmt.Errorf("migration %s: %.60q: after %q, want CREATE INDEX CONCURRENTLY IF NOT EXISTS or a statement marked %q", name, st.sql, outsideMarker, repeatMarker)
		}
		m.outside = append(m.outside, st)
	}
	return m, nil
}

// loadMigrations returns the embedded migrations, parsed, in order.
func loadMigrations() ([]migration, error) {
	names, bodies, err := sqlq.Migrations(migrationFiles)
	if err != nil {
		return nil, err
	}
	out := make([]migration, len(names))
	for i := range names {
		if out[i], err = parseMigration(names[i], bodies[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// migrateLockPoll is how often a migrator tries the migration lock while
// another holds it.
const migrateLockPoll = 200 * time.Millisecond

// migrateLock takes the session's migration lock of the schema on conn,
// trying again every migrateLockPoll while another migrator holds it: a
// session waiting in pg_advisory_lock would hold a snapshot all along, and
// the other's CREATE INDEX CONCURRENTLY waits for every older snapshot to
// go (it would wait for the waiter, which waits for it).
func (s *Store) migrateLock(ctx context.Context, conn *pgx.Conn) error {
	for {
		var ok bool
		if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('idem.migrate.' || $1))`, s.cfg.Schema).Scan(&ok); err != nil || ok {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(migrateLockPoll):
		}
	}
}

// migrateAll applies the missing migrations on conn, which holds the
// migration lock: those without an outside part together in one
// transaction, each with one in a transaction of its own followed by its
// outside part. A version is recorded when all of its migration is done.
func (s *Store) migrateAll(ctx context.Context, conn *pgx.Conn, ms []migration) error {
	for {
		next, err := s.migrateTx(ctx, conn, ms)
		if err != nil || next < 0 {
			return err
		}
		m := ms[next]
		for _, st := range m.outside {
			if err := s.runOutside(ctx, conn, st); err != nil {
				return fmt.Errorf("%s: %w", m.name, err)
			}
		}
		if _, err := conn.Exec(ctx, "SET search_path TO "+SearchPath(s.cfg.Schema)); err != nil {
			return err
		}
		_, err = conn.Exec(ctx, `INSERT INTO idem_migrations (version, name) VALUES ($1, $2)`, next+1, m.name)
		if err != nil {
			return fmt.Errorf("%s: %w", m.name, err)
		}
	}
}

// migrateTx runs, in one transaction, the missing migrations up to the
// first with an outside part, and returns its index (its transactional
// part committed, its version not recorded), or -1 when all are applied.
func (s *Store) migrateTx(ctx context.Context, conn *pgx.Conn, ms []migration) (int, error) {
	next := -1
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", MigrateLockTimeout.Milliseconds())); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{s.cfg.Schema}.Sanitize()); err != nil {
			return err
		}
		// The migrations name no schema: they create their objects in the
		// first schema of the search path, which this makes the store's
		// whatever the pool's connections say (New checks those after).
		if _, err := tx.Exec(ctx, "SET LOCAL search_path TO "+SearchPath(s.cfg.Schema)); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS idem_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
			return err
		}
		var current int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM idem_migrations`).Scan(&current); err != nil {
			return err
		}
		for i := current; i < len(ms); i++ {
			if _, err := tx.Exec(ctx, ms[i].tx); err != nil {
				return fmt.Errorf("%s: %w", ms[i].name, err)
			}
			if len(ms[i].outside) > 0 {
				next = i
				return nil
			}
			if _, err := tx.Exec(ctx, `INSERT INTO idem_migrations (version, name) VALUES ($1, $2)`, i+1, ms[i].name); err != nil {
				return err
			}
		}
		return nil
	})
	return next, err
}

// runOutside runs one statement of a migration's outside part on conn (a
// session of the migration's own, closed after it), in the store's schema
// and with the migration's lock timeout.
func (s *Store) runOutside(ctx context.Context, conn *pgx.Conn, st outsideStmt) error {
	set := fmt.Sprintf("SET search_path TO %s; SET lock_timeout = %d", SearchPath(s.cfg.Schema), MigrateLockTimeout.Milliseconds())
	if _, err := conn.Exec(ctx, set); err != nil {
		return err
	}
	if st.repeat {
		for {
			ct, err := conn.Exec(ctx, st.sql)
			if err != nil || ct.RowsAffected() == 0 {
				return err
			}
		}
	}
	return s.buildIndex(ctx, conn, st)
}

// concurrentTries bounds the attempts at a concurrent index build that a
// deadlock aborted: a build waits for every older transaction of the
// database, and a session waiting for a lock this one holds (a migrator
// of an earlier release, which waits for the migration lock inside a
// transaction) makes a deadlock the server resolves by cancelling one.
const concurrentTries = 5

// buildIndex builds the index st names, first dropping it when an
// interrupted build left it invalid: concurrently on a table of
// concurrentAbove bytes or more, at once on a smaller one. A concurrent
// build waits without lock_timeout (it waits for older transactions, not
// for writers, which it never holds off) and is tried again after a
// deadlock.
func (s *Store) buildIndex(ctx context.Context, conn *pgx.Conn, st outsideStmt) error {
	var size int64
	if err := conn.QueryRow(ctx, `SELECT coalesce(pg_relation_size(to_regclass($1)), 0)`, pgx.Identifier{s.cfg.Schema, st.table}.Sanitize()).Scan(&size); err != nil {
		return err
	}
	if size < concurrentAbove {
		return s.buildIndexOnce(ctx, conn, st, st.plain, "DROP INDEX IF EXISTS ")
	}
	if _, err := conn.Exec(ctx, "SET lock_timeout = 0"); err != nil {
		return err
	}
	var err error
	for try := 1; try <= concurrentTries; try++ {
		err = s.buildIndexOnce(ctx, conn, st, st.sql, "DROP INDEX CONCURRENTLY IF EXISTS ")
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "40P01" {
			break
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(try) * time.Second):
		}
	}
	return err
}

// buildIndexOnce drops st's index when it is invalid, then builds it.
func (s *Store) buildIndexOnce(ctx context.Context, conn *pgx.Conn, st outsideStmt, build, drop string) error {
	var valid bool
	err := conn.QueryRow(ctx, `SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`, s.cfg.Schema, st.index).Scan(&valid)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return err
	case !valid:
		if _, err := conn.Exec(ctx, drop+pgx.Identifier{s.cfg.Schema, st.index}.Sanitize()); err != nil {
			return fmt.Errorf("drop the invalid index %s: %w", st.index, err)
		}
	}
	if _, err := conn.Exec(ctx, build); err != nil {
		return fmt.Errorf("build index %s: %w", st.index, err)
	}
	return nil
}

// migrateError explains a migration's failure: a lock not granted within
// MigrateLockTimeout, or a role without the privileges.
func (s *Store) migrateError(err error, version int) error {
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "42501":
		return fmt.Errorf("pgstore: migrate schema %s: permission denied (%s): run `idem migrate` as a role that may create schemas and tables, or grant CREATE on the database", s.cfg.Schema, pe.Message)
	case errors.As(err, &pe) && pe.Code == "55P03":
		return fmt.Errorf("pgstore: migrate schema %s: a lock was not granted within %s (a long transaction or busy writers hold a table): the schema stays at version %d; run the migration again at a quieter time: %w",
			s.cfg.Schema, MigrateLockTimeout, version, redact(err))
	}
	return fmt.Errorf("pgstore: migrate schema %s: %w", s.cfg.Schema, redact(err))
}

package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store/pgstore"
)

// lastVersion is the version before migration 17, the first with a part
// outside its transaction.
const lastVersion = 16

// rollBack makes s's schema look migrated to lastVersion only (the
// migrations are idempotent: Migrate runs the later ones again), on a
// connection of its own, which it returns.
func rollBack(t *testing.T, s *pgstore.Store) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgstore.SearchPath(s.Schema())); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `DELETE FROM idem_migrations WHERE version > $1`, lastVersion); err != nil {
		t.Fatal(err)
	}
	return conn
}

func schemaVersion(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var v int
	if err := conn.QueryRow(context.Background(), `SELECT max(version) FROM idem_migrations`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// indexValid reports whether the index name exists in schema, and is valid.
func indexValid(t *testing.T, conn *pgx.Conn, schema, name string) (exists, valid bool) {
	t.Helper()
	err := conn.QueryRow(context.Background(), `SELECT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`, schema, name).Scan(&valid)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true, valid
}

// TestMigrateRebuildsInterruptedIndex: an index whose concurrent build was
// interrupted (here by a lock timeout while another session wrote the
// table) is left invalid; the next Migrate drops it and builds it again.
func TestMigrateRebuildsInterruptedIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, pgstore.Config{})
	conn := rollBack(t, s)
	const idx = "idem_dead_letters_open"
	if _, err := conn.Exec(ctx, "DROP INDEX "+idx); err != nil {
		t.Fatal(err)
	}
	writer, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(ctx)
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE "+pgx.Identifier{s.Schema(), "idem_dead_letters"}.Sanitize()+" SET reason = reason WHERE false"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SET lock_timeout = 200"); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, `CREATE INDEX CONCURRENTLY IF NOT EXISTS `+idx+` ON idem_dead_letters (id COLLATE "C")
WHERE archived_at IS NULL AND coalesce(latest_outcome, '') NOT IN ('pending', 'succeeded', 'duplicate')`)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Fatalf("build beside a writer: got %v, want lock_not_available (55P03)", err)
	}
	if exists, valid := indexValid(t, conn, s.Schema(), idx); !exists || valid {
		t.Fatalf("after the interrupted build: index exists %v, valid %v; want an invalid index left", exists, valid)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate again: got %v, want nil", err)
	}
	if exists, valid := indexValid(t, conn, s.Schema(), idx); !exists || !valid {
		t.Errorf("after Migrate: index exists %v, valid %v; want it built again, valid", exists, valid)
	}
	if v := schemaVersion(t, conn); v != pgstore.SchemaVersion() {
		t.Errorf("after Migrate: version %d, want %d", v, pgstore.SchemaVersion())
	}
}

// TestMigrateLockTimeoutFailsClearly: a migration that waits for a lock
// another session holds fails after pgstore.MigrateLockTimeout with an
// error that says to retry at a quieter time, the schema stays at its
// previous version, and Migrate succeeds once the lock is gone.
func TestMigrateLockTimeoutFailsClearly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, pgstore.Config{})
	conn := rollBack(t, s)
	holder, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{s.Schema(), "idem_dead_letters"}.Sanitize()+" IN ACCESS SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	err = s.Migrate(ctx)
	var pe *pgconn.PgError
	if err == nil || !strings.Contains(err.Error(), "quieter time") || !strings.Contains(err.Error(), "version 16") || !errors.As(err, &pe) || pe.Code != "55P03" {
		t.Fatalf("migrate beside a lock: got %v, want lock_not_available (55P03) saying the schema stays at version 16 and to retry at a quieter time", err)
	}
	if v := schemaVersion(t, conn); v != lastVersion {
		t.Errorf("after the failed migration: version %d, want %d", v, lastVersion)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctx); err != nil {
		t.Fatalf("migrate once the lock is gone: got %v, want nil", err)
	}
	if v := schemaVersion(t, conn); v != pgstore.SchemaVersion() {
		t.Errorf("after Migrate: version %d, want %d", v, pgstore.SchemaVersion())
	}
}

// TestMigrateConcurrently: two migrators of one schema, the second
// waiting for the first's lock while the first builds its indexes
// concurrently, both succeed (a waiter must not hold a snapshot the
// concurrent build waits for).
func TestMigrateConcurrently(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, pgstore.Config{})
	other, err := pgstore.Open(ctx, testenv.PostgresURL(t), &pgstore.Config{Schema: s.Schema(), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	conn := rollBack(t, s)
	errs := make(chan error, 2)
	for _, st := range []*pgstore.Store{s, other} {
		go func() { errs <- st.Migrate(ctx) }()
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Errorf("migrate beside another migrator: got %v, want nil", err)
		}
	}
	if v := schemaVersion(t, conn); v != pgstore.SchemaVersion() {
		t.Errorf("after both: version %d, want %d", v, pgstore.SchemaVersion())
	}
}

// TestMigrateConcurrentBuildOutwaitsLockTimeout: on a table big enough for
// a concurrent index build, the build waits for an older transaction
// however long it runs (it holds off no writer meanwhile), instead of
// failing after pgstore.MigrateLockTimeout and leaving an invalid index.
func TestMigrateConcurrentBuildOutwaitsLockTimeout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, pgstore.Config{})
	conn := rollBack(t, s)
	// About 10 MB of dead letters: over the size from which indexes are
	// built concurrently.
	if _, err := conn.Exec(ctx, `INSERT INTO idem_dead_letters (id, envelope, body, reason, error, saga_type, key, attempts, first_failed_at, last_failed_at)
SELECT 'd-' || i, json_build_object('id', 'd-' || i, 'type', 'orders.Placed'), convert_to(repeat('x', 1000), 'UTF8'), 'permanent_error', 'no', 'order', 'k-' || i, 1, now(), now()
FROM generate_series(1, 9000) i`); err != nil {
		t.Fatal(err)
	}
	const idx = "idem_dead_letters_open"
	if _, err := conn.Exec(ctx, "DROP INDEX "+idx); err != nil {
		t.Fatal(err)
	}
	holder, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(ctx)
	tx, err := holder.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	var holderPID int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT txid_current()) x`).Scan(&holderPID); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Migrate(ctx) }()
	// Once the migrator waits for the older transaction, keep it waiting
	// longer than the migration's lock timeout: the scenario, not a way to
	// wait for something.
	enginetest.Eventually(t, func() string {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks w JOIN pg_locks h ON h.virtualxid = w.virtualxid AND h.granted
WHERE w.locktype = 'virtualxid' AND NOT w.granted AND h.pid = $1`, holderPID).Scan(&n); err != nil {
			return err.Error()
		}
		if n == 0 {
			return "the migrator does not wait for the older transaction yet"
		}
		return ""
	})
	select {
	case err := <-done:
		t.Fatalf("migrate beside an older transaction: returned %v while the transaction ran; want it to wait", err)
	case <-time.After(pgstore.MigrateLockTimeout + time.Second):
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("migrate once the older transaction ended: got %v, want nil", err)
	}
	if exists, valid := indexValid(t, conn, s.Schema(), idx); !exists || !valid {
		t.Errorf("after Migrate: index exists %v, valid %v; want it built, valid", exists, valid)
	}
	if v := schemaVersion(t, conn); v != pgstore.SchemaVersion() {
		t.Errorf("after Migrate: version %d, want %d", v, pgstore.SchemaVersion())
	}
}

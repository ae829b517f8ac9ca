package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/readmodel"
)

// Migration 10 adds the dead-letter history columns without writing
// idem_dead_letters' rows again (constant defaults, no UPDATE of every
// row), nor do those up to 16 (migration 17 backfills its columns in
// batches, outside its transaction), and a dead
// letter stored before it reads its first failure from its current one,
// is selected by a mark and by its message type, and keeps that first
// failure when it fails again.
func TestDeadLetterHistoryMigrationKeepsOldRows(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	ctx := context.Background()
	schema := "dlmig_" + randHex()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx, url)
		if err == nil {
			_, _ = c.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
			_ = c.Close(ctx)
		}
	})
	names, bodies, err := pgstore.Migrations()
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, q, args...); err != nil {
			t.Fatalf("%.60s: %v", q, err)
		}
	}
	exec("CREATE SCHEMA " + pgx.Identifier{schema}.Sanitize())
	exec("SET search_path TO " + pgstore.SearchPath(schema))
	exec(`CREATE TABLE idem_migrations (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`)
	for i := range 9 {
		exec(bodies[i])
		exec(`INSERT INTO idem_migrations (version, name) VALUES ($1, $2)`, i+1, names[i])
	}
	exec(`INSERT INTO idem_dead_letters (id, envelope, body, reason, error, saga_type, key, attempts, first_failed_at, last_failed_at)
VALUES ('old', '{"id":"old","type":"orders.Placed"}', ''::bytea, 'unknown_type', 'no handler', 'order', 'k', 1, now(), now())`)
	// The table's file and the row's version (xmin) before: a rewrite
	// changes the first, an UPDATE of every row the second.
	const version = `SELECT (SELECT relfilenode::text FROM pg_class WHERE oid = 'idem_dead_letters'::regclass) || '/' || xmin::text FROM idem_dead_letters WHERE id = 'old'`
	var before, after string
	if err := conn.QueryRow(ctx, version).Scan(&before); err != nil {
		t.Fatal(err)
	}

	for i := 9; i < 16; i++ {
		exec(bodies[i])
		exec(`INSERT INTO idem_migrations (version, name) VALUES ($1, $2)`, i+1, names[i])
	}
	if err := conn.QueryRow(ctx, version).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if after != before {
		t.Errorf("migrations 10 to 16 rewrote idem_dead_letters or updated its rows (file/xmin %s, then %s): every row written again under its lock", before, after)
	}
	s, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: schema, Migrate: true, MaxConns: 4})
	if err != nil {
		t.Fatalf("migrate: %v", err)
	}
	defer s.Close()
	if ds, err := s.QueryDeadLetters(ctx, &readmodel.DeadLetterQuery{MessageType: "orders.Placed", State: store.DeadLettersUnresolved}); err != nil || len(ds) != 1 {
		t.Fatalf("query by message type and state after migration 17's backfill: %d, %v; want the old dead letter", len(ds), err)
	}
	d, err := s.GetDeadLetter(ctx, "old")
	if err != nil || d.FirstReason != "unknown_type" || d.FirstError != "no handler" {
		t.Fatalf("old dead letter after the migration: %+v, %v; want its first failure unknown_type / no handler", d, err)
	}
	c, err := s.CountDeadLetters(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ds, err := s.QueryDeadLetters(ctx, &readmodel.DeadLetterQuery{AsOf: c.AsOf}); err != nil || len(ds) != 1 {
		t.Fatalf("query as of a mark: %d, %v; want the old dead letter", len(ds), err)
	}
	at := time.Now().UTC().Truncate(time.Microsecond)
	if err := s.BeginReplay(ctx, "old", at); err != nil {
		t.Fatal(err)
	}
	again := *d
	again.Envelope.Headers = map[string]string{store.HeaderReplay: at.Format(time.RFC3339Nano)}
	again.Reason, again.Error, again.LastFailedAt = "permanent_error", "declined", at.Add(time.Second)
	uow, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{DeadLetters: []store.DeadLetter{again}}); err != nil {
		t.Fatal(err)
	}
	d, err = s.GetDeadLetter(ctx, "old")
	if err != nil || d.FirstReason != "unknown_type" || d.FirstError != "no handler" || d.Reason != "permanent_error" || d.LastReplay().Outcome != store.ReplayFailed {
		t.Errorf("old dead letter failed again: %+v, %v; want first failure unknown_type / no handler kept, reason permanent_error, replay failed", d, err)
	}
}

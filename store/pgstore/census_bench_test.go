package pgstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/deploycheck"
	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store/storetest"
)

// BenchmarkDeployCheck times deploycheck.Check on a store that holds
// IDEM_BENCH_SAGAS live sagas (default 10,000) of 3 saga types in 6 states
// at 2 schema versions, a fifth as many finished ones, a pending timer for
// 30% of the live ones, min(10,000, sagas) messages in the queue and as
// many unsent in the outbox, and 2 attributes on every other saga, checked
// against machines that serve all of it (no hazard). The data is made
// once, with set-based SQL (b.Loop runs the function once); one op is
// one check, so -benchtime 3x is three checks of one data set. It reports the median,
// lowest and highest seconds per check, then times each census query
// alone; IDEM_BENCH_EXPLAIN=1 also logs each query's EXPLAIN ANALYZE.
// docs/benchmarks.md, "Deploy check".
func BenchmarkDeployCheck(b *testing.B) {
	n := storetest.BenchSagas(b)
	ctx := context.Background()
	s := openCensusBench(b)
	filled := time.Now()
	fillCensusBench(ctx, b, s, n)
	b.Logf("filled %d live sagas in %s", n, time.Since(filled).Round(time.Millisecond))
	o := deploycheck.Options{Machines: storetest.CensusBenchMachines()}
	var took []time.Duration
	for b.Loop() {
		started := time.Now()
		r, err := deploycheck.Check(ctx, s, o)
		took = append(took, time.Since(started))
		if err != nil {
			b.Fatal(err)
		}
		storetest.CheckCensusReport(b, r, n)
	}
	storetest.ReportChecks(b, took, n)
	storetest.TimeCensusQueries(b, sqlq.CensusQueries(censusDialect), func(sql string) error { _, err := s.pool.Exec(ctx, sql); return err },
		func(sql string) string { return explainCensus(ctx, b, s, sql) })
}

// openCensusBench opens a store on a schema of its own, dropped when the
// benchmark ends.
func openCensusBench(b *testing.B) *Store {
	b.Helper()
	ctx := context.Background()
	url := testenv.PostgresURL(b)
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	schema := "bench_census_" + hex.EncodeToString(suffix)
	s, err := Open(ctx, url, &Config{Schema: schema, Migrate: true})
	if err != nil {
		b.Fatalf("open store: %v", err)
	}
	b.Cleanup(func() {
		_ = s.Close()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			b.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			b.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return s
}

// fillCensusBench writes the benchmark's data: saga g (1..n live, then
// n/5 finished) is of type g%3, in state (g/3)%6, at schema version 1
// when g%5 == 0, has a timer when g%10 < 3 and attributes when g%2 == 0.
func fillCensusBench(ctx context.Context, b *testing.B, s *Store, n int) {
	b.Helper()
	const types = `(ARRAY['order','payment','shipment'])[g % 3 + 1]`
	const states = `(ARRAY['Placed','Paid','Packed','Shipped','Delivered','Held'])[(g / 3) % 6 + 1]`
	for _, q := range []string{
		`INSERT INTO idem_instances (saga_type, key, state, data, schema_version, version, created_at, updated_at, finished_at, attributes)
SELECT ` + types + `, 'k-' || g, CASE WHEN g > $1 THEN 'Done' ELSE ` + states + ` END,
  jsonb_build_object('customer', 'c-' || (g % 5000), 'total', g, 'lines', 3, 'note', repeat('x', 64)),
  CASE WHEN g % 5 = 0 THEN 1 ELSE 2 END, 3, now(), now(), CASE WHEN g > $1 THEN now() END,
  CASE WHEN g % 2 = 0 THEN jsonb_build_object('customer', 'c-' || (g % 5000), 'region', 'r-' || (g % 7)) END
FROM generate_series(1, $1 + $1 / 5) g`,
		`INSERT INTO idem_timers (saga_type, key, name, due_at, envelope, body)
SELECT ` + types + `, 'k-' || g, 'deadline', now() + interval '1 hour',
  jsonb_build_object('id', 't-' || g, 'type', ` + types + ` || '.Timeout', 'correlation_id', 'k-' || g), '\x7b7d'::bytea
FROM generate_series(1, $1) g WHERE g % 10 < 3`,
		`INSERT INTO idem_queue (id, envelope, body, visible_at)
SELECT 'q-' || g, jsonb_build_object('id', 'q-' || g, 'type', ` + types + ` || '.Advance', 'correlation_id', 'k-' || g), '\x7b7d'::bytea, now() + interval '1 hour'
FROM generate_series(1, least($1, 10000)) g`,
		`INSERT INTO idem_outbox (id, envelope, body, created_at)
SELECT 'o-' || g, jsonb_build_object('id', 'o-' || g, 'type', ` + types + ` || '.Advance', 'correlation_id', 'k-' || g), '\x7b7d'::bytea, now()
FROM generate_series(1, least($1, 10000)) g`,
	} {
		if _, err := s.pool.Exec(ctx, q, n); err != nil {
			b.Fatalf("fill: %v\n%s", err, q)
		}
	}
	// What autovacuum would have done by the time a deploy is checked.
	if _, err := s.pool.Exec(ctx, `VACUUM ANALYZE idem_instances, idem_timers, idem_queue, idem_outbox, idem_saga_attributes`); err != nil {
		b.Fatalf("vacuum: %v", err)
	}
}

// explainCensus is EXPLAIN (ANALYZE, BUFFERS) of one census query.
func explainCensus(ctx context.Context, b *testing.B, s *Store, sql string) string {
	rows, err := s.pool.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql)
	if err != nil {
		b.Fatalf("explain: %v", err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		b.Fatalf("explain: %v", err)
	}
	return strings.Join(lines, "\n")
}

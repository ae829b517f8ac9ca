package sqlitestore

import (
	"context"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/deploycheck"
	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store/storetest"
)

// BenchmarkDeployCheck times deploycheck.Check on a store that holds
// IDEM_BENCH_SAGAS live sagas (default 10,000) of 3 saga types in 6 states
// at 2 schema versions, a fifth as many finished ones, a pending timer for
// 30% of the live ones, min(10,000, sagas) messages in the queue and as
// many unsent in the outbox, and 2 attributes on every other saga, checked
// against machines that serve all of it (no hazard): the data of
// pgstore's BenchmarkDeployCheck. The data is made once, with recursive
// CTEs (b.Loop runs the function once); one op is one check, so
// -benchtime 3x is three checks of one data set. It reports the median,
// lowest and highest seconds per check, then times each census query
// alone; IDEM_BENCH_EXPLAIN=1 also logs each query's plan.
// docs/benchmarks.md, "Deploy check".
func BenchmarkDeployCheck(b *testing.B) {
	n := storetest.BenchSagas(b)
	ctx := context.Background()
	path := filepath.Join(b.TempDir(), "idem.db")
	filled := time.Now()
	fillCensusBench(ctx, b, openCensusBench(b, path), n)
	b.Logf("filled %d live sagas in %s", n, time.Since(filled).Round(time.Millisecond))
	// Checked by a store opened afterwards, as `idem deploy check` or a
	// starting engine opens it: the store that wrote the data checked it
	// several times slower.
	s := openCensusBench(b, path)
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
	storetest.TimeCensusQueries(b, sqlq.CensusQueries(censusDialect), func(sql string) error { return drainCensus(ctx, s, sql) },
		func(sql string) string { return explainCensus(ctx, b, s, sql) })
}

// openCensusBench opens a store on path, closed when the benchmark ends.
func openCensusBench(b *testing.B, path string) *Store {
	s, err := Open(context.Background(), path, &Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatalf("open store: %v", err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

// fillCensusBench writes the benchmark's data: saga g (1..n live, then
// n/5 finished) is of type g%3, in state (g/3)%6, at schema version 1
// when g%5 == 0, has a timer when g%10 < 3 and attributes when g%2 == 0.
func fillCensusBench(ctx context.Context, b *testing.B, s *Store, n int) {
	b.Helper()
	const series = `WITH RECURSIVE s(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM s WHERE g < ?1) `
	const types = `CASE g % 3 WHEN 0 THEN 'order' WHEN 1 THEN 'payment' ELSE 'shipment' END`
	const states = `CASE (g / 3) % 6 WHEN 0 THEN 'Placed' WHEN 1 THEN 'Paid' WHEN 2 THEN 'Packed' WHEN 3 THEN 'Shipped' WHEN 4 THEN 'Delivered' ELSE 'Held' END`
	const now = `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`
	for _, q := range []struct {
		sql   string
		count int
	}{
		{`INSERT INTO idem_instances (saga_type, key, state, data, schema_version, version, created_at, updated_at, finished_at, attributes)
` + series + `SELECT ` + types + `, 'k-' || g, CASE WHEN g > ?2 THEN 'Done' ELSE ` + states + ` END,
  json_object('customer', 'c-' || (g % 5000), 'total', g, 'lines', 3, 'note', printf('%.64c', 'x')),
  CASE WHEN g % 5 = 0 THEN 1 ELSE 2 END, 3, ` + now + `, ` + now + `, CASE WHEN g > ?2 THEN ` + now + ` END,
  CASE WHEN g % 2 = 0 THEN json_object('customer', 'c-' || (g % 5000), 'region', 'r-' || (g % 7)) END
FROM s`, n + n/5},
		{`INSERT INTO idem_timers (saga_type, key, name, due_at, envelope_id, envelope, body)
` + series + `SELECT ` + types + `, 'k-' || g, 'deadline', ` + now + ` + 3600000000, 't-' || g,
  json_object('id', 't-' || g, 'type', ` + types + ` || '.Timeout', 'correlation_id', 'k-' || g), x'7b7d'
FROM s WHERE g % 10 < 3`, n},
		{`INSERT INTO idem_queue (id, envelope, body, visible_at)
` + series + `SELECT 'q-' || g, json_object('id', 'q-' || g, 'type', ` + types + ` || '.Advance', 'correlation_id', 'k-' || g), x'7b7d', ` + now + ` + 3600000000
FROM s`, min(n, 10_000)},
		{`INSERT INTO idem_outbox (id, envelope, body, created_at)
` + series + `SELECT 'o-' || g, json_object('id', 'o-' || g, 'type', ` + types + ` || '.Advance', 'correlation_id', 'k-' || g), x'7b7d', ` + now + `
FROM s`, min(n, 10_000)},
		{`ANALYZE`, 0},
		// What the store's checkpoints would have done by the time a
		// deploy is checked: a reader of a fresh 1,000,000-saga WAL
		// looks every page up in it, several times slower.
		{`PRAGMA wal_checkpoint(TRUNCATE)`, 0},
	} {
		if _, err := s.wconn.ExecContext(ctx, q.sql, q.count, n); err != nil {
			b.Fatalf("fill: %v\n%s", err, q.sql)
		}
	}
}

// drainCensus runs one census query and reads its rows.
func drainCensus(ctx context.Context, s *Store, q string) error {
	rows, err := s.rdb.QueryContext(ctx, q)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
	}
	return rows.Err()
}

// explainCensus is EXPLAIN QUERY PLAN of one census query.
func explainCensus(ctx context.Context, b *testing.B, s *Store, q string) string {
	rows, err := s.rdb.QueryContext(ctx, "EXPLAIN QUERY PLAN "+q)
	if err != nil {
		b.Fatalf("explain: %v", err)
	}
	defer rows.Close()
	var lines []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			b.Fatalf("explain: %v", err)
		}
		lines = append(lines, strconv.Itoa(parent)+" "+strconv.Itoa(id)+" "+detail)
	}
	return strings.Join(lines, "\n")
}

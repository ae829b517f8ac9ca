package bench

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
)

// TestCostCountsAKnownRun runs 200 deliveries at batch 1 on PostgreSQL and
// SQLite with Options.Cost and checks the counters against what the
// workload must at least cost: a commit per delivery, three rows inserted
// per distinct message (inbox, journal or outbox, emitted message) and a
// queue row deleted per delivery. A broken counter reads zero or less.
// The run has a database of its own: commits are the database's, and under
// scripts/test the other packages' engines share the server (CI counted
// 5993 commits for 200 deliveries in the shared database).
func TestCostCountsAKnownRun(t *testing.T) {
	url := testenv.PostgresDatabase(t, "costtest")
	o := Options{URL: url, SchemaPrefix: "costtest", Messages: 200, Keys: 50, Dup: 0.2, Batches: []int{1}, Lanes: []int{1},
		Consumers: []int{1}, BaselineClients: 2, BaselineBatch: 10, LatencyDuration: time.Second, Seed: 3, Timeout: 5 * time.Minute, Cost: true}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.ExactlyOnce {
		t.Fatalf("exactly-once violated: %+v", rep.Runs)
	}
	n, distinct := int64(rep.Messages), int64(rep.Distinct)
	if len(rep.Runs) != 1 || rep.Runs[0].Cost == nil {
		t.Fatalf("want one PostgreSQL run with a cost, got %+v", rep.Runs)
	}
	pg := rep.Runs[0].Cost
	t.Logf("PostgreSQL: %+v", *pg)
	checkCost(t, "PostgreSQL", pg, n, distinct)
	if pg.Statements < pg.RoundTrips || pg.RoundTrips < n {
		t.Errorf("PostgreSQL: %d statements and %d round trips for %d deliveries at batch 1", pg.Statements, pg.RoundTrips, n)
	}
	if pg.WALRecords < pg.RowsWritten() || pg.Fsyncs < distinct/2 {
		t.Errorf("PostgreSQL: %d WAL records and %d fsyncs for %d rows written, %d commits", pg.WALRecords, pg.Fsyncs, pg.RowsWritten(), pg.Commits)
	}
	if len(rep.SQLite) != 1 || rep.SQLite[0].Cost == nil || len(rep.SQLite[0].Problems) > 0 {
		t.Fatalf("want one clean SQLite run with a cost, got %+v", rep.SQLite)
	}
	lite := rep.SQLite[0].Cost
	t.Logf("SQLite: %+v", *lite)
	checkCost(t, "SQLite", lite, n, distinct)
}

func checkCost(t *testing.T, mode string, c *Cost, n, distinct int64) {
	t.Helper()
	if c.Messages != int(n) || c.Commits < n || c.Commits > 20*n {
		t.Errorf("%s: %d commits for %d deliveries at batch 1, want at least one each", mode, c.Commits, c.Messages)
	}
	if c.RowsInserted < 3*distinct || c.RowsDeleted < n || c.RowsUpdated < 1 {
		t.Errorf("%s: rows inserted/updated/deleted %d/%d/%d, want at least %d/1/%d", mode, c.RowsInserted, c.RowsUpdated, c.RowsDeleted, 3*distinct, n)
	}
}

// TestPGCostOfNothingIsZero measures empty windows: the bench's own
// statements must not show up in the counters. Rows and the client's
// counts are the store's alone and must be zero in every window; commits
// are the database's, which other clients add to, and must not be
// negative (the bench's own transactions over-subtracted).
func TestPGCostOfNothingIsZero(t *testing.T) {
	// Under scripts/test the other packages' engines share the server, so
	// no window settles: waiting 10 s for each of twenty cost 200 s.
	defer func(d time.Duration) { settleTimeout = d }(settleTimeout)
	settleTimeout = 500 * time.Millisecond
	r := &runner{o: Options{URL: testenv.PostgresURL(t), SchemaPrefix: "costzero", Cost: true}, id: randHex(3), log: testWriter{t}}
	ctx := context.Background()
	st, _, closeFn, err := r.open(ctx, "_z", 4)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	zero := false
	for i := range 10 {
		m, err := r.startPGCost(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		c, err := m.finish(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		if c.Statements != 0 || c.RoundTrips != 0 || c.RowsWritten() != 0 || c.Commits < 0 {
			t.Errorf("window %d with nothing in it cost %+v", i, *c)
		}
		zero = zero || c.Commits == 0
	}
	// Commits are the server's: other clients of a shared server (the
	// other packages' tests under scripts/test) commit in every window,
	// so only a window with none proves the bench's own are taken out.
	t.Logf("a window counted no commit: %v", zero)
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) { w.t.Log(string(b)); return len(b), nil }

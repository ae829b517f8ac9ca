package torture

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testenv"
)

// The commit audit records the port of the server each journal insert
// committed on, and a failover's first commit is the earliest on the new
// primary from its fault until the next failover's: not one on another
// server, nor one before the fault.
func TestMeasureFailovers(t *testing.T) {
	ctx := context.Background()
	url := testenv.PostgresURL(t)
	schema := fmt.Sprintf("torture_measure_%d", time.Now().UnixNano()%1e9)
	admin, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ident := pgx.Identifier{schema}.Sanitize()
	if _, err := admin.ExecContext(ctx, "CREATE SCHEMA "+ident+"; CREATE TABLE "+ident+".idem_journal (x int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = admin.ExecContext(ctx, "DROP SCHEMA "+ident+" CASCADE") })
	if _, err := admin.ExecContext(ctx, fmt.Sprintf(pgCommitAudit, ident)); err != nil {
		t.Fatal(err)
	}
	db, err := openDB(url, schema)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var track string
	var port int
	if err := db.QueryRowContext(ctx, `SELECT current_setting('track_commit_timestamp'), inet_server_port()`).Scan(&track, &port); err != nil {
		t.Fatal(err)
	}
	if track == "on" {
		t.Skip("track_commit_timestamp is on: the audit's commit times cannot be set by the test")
	}
	// A commit through the trigger, then rows dated by hand.
	before := time.Now()
	if _, err := db.ExecContext(ctx, `INSERT INTO idem_journal VALUES (1), (2)`); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	var n int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM `+commitAudit+` WHERE server = $1`, port).Scan(&n); err != nil || n != 1 {
		t.Fatalf("audit rows for one insert statement on port %d: got %d (%v), want 1", port, n, err)
	}
	t0 := before.Add(-time.Hour).Truncate(time.Microsecond) // PostgreSQL keeps microseconds
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	for _, row := range []struct {
		server int
		at     time.Time
	}{
		{port, at(-time.Second)},               // before the first fault
		{port + 1, at(500 * time.Millisecond)}, // another server
		{port, at(2 * time.Second)},            // the first failover's first commit
		{port, at(3 * time.Second)},
		{port + 1, at(11 * time.Second)}, // the second failover's, on port+1
	} {
		if _, err := db.ExecContext(ctx, `INSERT INTO `+commitAudit+` (server, at) VALUES ($1, $2)`, row.server, row.at); err != nil {
			t.Fatal(err)
		}
	}
	fos := []Failover{
		{Kind: FailoverKill, To: "b", NewPort: port, At: at(0)},
		{Kind: FailoverSwitchover, To: "c", NewPort: port + 1, At: at(10 * time.Second)},
		{Kind: FailoverFence, To: "b", NewPort: port + 2, At: at(20 * time.Second)}, // nothing committed there
		{Kind: FailoverKill, Problem: "no new leader", At: at(30 * time.Second)},
		{Kind: FailoverKill, To: "b", NewPort: port, At: before.Add(-time.Millisecond)},
	}
	if err := measureFailovers(ctx, db, schema, fos); err != nil {
		t.Fatal(err)
	}
	want := []time.Time{at(2 * time.Second), at(11 * time.Second), {}, {}}
	for i, w := range want {
		if !fos[i].FirstCommit.Equal(w) {
			t.Errorf("failover %d: first commit %s, want %s", i+1, fos[i].FirstCommit, w)
		}
	}
	if fc := fos[4].FirstCommit; fc.Before(before.Add(-time.Millisecond)) || fc.After(after) {
		t.Errorf("failover 5: first commit %s, want the trigger's, between %s and %s", fc, before, after)
	}
}

// A short failover torture on a Patroni cluster (scripts/pg-ha.sh): the
// primary is killed, switched over and fenced read-only with its sessions
// open, and every invariant holds, with a commit on each new primary.
func TestTortureFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a failover torture of about a minute")
	}
	url := testenv.Server(t, "IDEM_TEST_PG_HA_URL", "failover tortures", "(scripts/pg-ha.sh's pg_ha_start sets it)")
	patroni := testenv.Server(t, "IDEM_TEST_PG_HA_PATRONI", "failover tortures", "(scripts/pg-ha.sh's pg_ha_start sets it)")
	if !strings.Contains(url, ",") {
		t.Fatalf("IDEM_TEST_PG_HA_URL %q names one host: want the cluster's multi-host URL", url)
	}
	r := run(t, Options{Store: url, Patroni: patroni, Duration: 20 * time.Second, Seed: 11, MinKills: 2,
		Faults: []string{FaultFailover, FaultKill, FaultDuplicates}})
	if !r.Pass() {
		t.Fatalf("run failed: %v %v", r.Problems, r.Violations)
	}
	kinds := map[string]bool{}
	for _, f := range r.Failover.Failovers {
		kinds[f.Kind] = true
	}
	for _, k := range FailoverKinds {
		if !kinds[k] {
			t.Errorf("no %s failover in the run: %+v", k, r.Failover.Failovers)
		}
	}
}

package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/cmd/idem/internal/bench"
	"github.com/idemhq/idem/internal/testenv"
)

func TestBenchSmallRun(t *testing.T) {
	t.Parallel()
	url := testenv.PostgresURL(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	prefix := "t_" + hex.EncodeToString(b[:])
	const messages, keys, seed = 300, 20, 5
	profile := filepath.Join(t.TempDir(), "cpu.pprof")
	code, out, errOut := run(t, "bench", "--cpuprofile", profile, "--store", url, "--schema", prefix, "--messages", "300", "--keys", "20", "--seed", "5",
		"--batch", "10", "--lanes", "1", "--consumers", "1", "--claim", "lease,tx", "--baseline-clients", "3", "--baseline-batch", "25",
		"--latency-duration", "200ms", "--latency-warmup", "100ms", "--dedup", "retention,token", "--keep-schemas", "--json", "--quiet")
	var rep bench.Report
	jerr := json.Unmarshal([]byte(out), &rep)

	// The schemas were kept so that this test can look at them itself; drop
	// them however the run went.
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() {
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT nspname FROM pg_namespace WHERE starts_with(nspname, $1)`, prefix+"_")
		if err != nil {
			t.Errorf("list schemas: %v", err)
			return
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Errorf("list schemas: %v", err)
		}
		for _, n := range names {
			if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{n}.Sanitize()+" CASCADE"); err != nil {
				t.Errorf("drop schema %s: %v", n, err)
			}
		}
	})

	if code != 0 || jerr != nil {
		t.Fatalf("exit %d (want 0), JSON error %v\nstdout:\n%s\nstderr:\n%s", code, jerr, out, errOut)
	}
	if fi, err := os.Stat(profile); err != nil || fi.Size() == 0 {
		t.Errorf("--cpuprofile wrote no profile: %v", err)
	}
	// /proc counts the server's time in 10 ms ticks, which a baseline of
	// 300 messages may not reach: check that it was measured, not that it
	// is above zero (TestCPUMeterCountsServerAndClient checks the amount).
	for _, b := range rep.Baselines {
		if b.CPU == nil || b.CPU.ClientUs <= 0 || !strings.Contains(b.CPU.Server, "postmaster") {
			t.Errorf("baseline (%s): CPU per delivery %+v, want client time and the server measured (the test server is local)", b.Name, b.CPU)
		}
	}
	for _, r := range rep.Runs {
		if r.CPU == nil || r.CPU.ClientUs <= 0 || !strings.Contains(r.CPU.Server, "postmaster") {
			t.Errorf("run %+v: CPU per delivery %+v, want client time and the server measured", r.Batch, r.CPU)
		}
	}
	w := bench.NewWorkload(messages, keys, 0.2, seed, "m-")
	if rep.Messages != messages || rep.Distinct != w.Distinct || rep.Duplicates != 60 {
		t.Errorf("report counts %d deliveries, %d distinct, %d duplicates; want %d, %d, 60", rep.Messages, rep.Distinct, rep.Duplicates, messages, w.Distinct)
	}
	if !rep.ExactlyOnce {
		t.Errorf("report says exactly-once was violated: %+v", rep)
	}
	if len(rep.Baselines) != 2 || len(rep.Runs) != 8 {
		t.Fatalf("got %d baselines and %d runs, want 2 and 8 (the defaults, then batch 10 lanes 1, each with retention and token, each claimed with a lease and in the unit of work)", len(rep.Baselines), len(rep.Runs))
	}
	for _, r := range rep.Runs[:4] {
		// The zero Config: batch 64, one consumer.
		if !r.Defaults || r.Batch != 64 || r.Lanes < 1 || r.Consumers != 4 || !r.ExactlyOnce {
			t.Errorf("defaults run %+v: want defaults, batch 64, one consumer, exactly once", r)
		}
	}
	rep.Runs = rep.Runs[4:]
	for _, b := range rep.Baselines {
		if b.TransitionsPerSec <= 0 || b.RoundTripsPerMsg <= 0 || b.Applied != int64(w.Distinct) || b.Duplicates != int64(w.Duplicates()) || !b.ExactlyOnce {
			t.Errorf("baseline (%s) = %+v: want positive rates, %d applied, %d duplicates skipped, exactly once", b.Name, b, w.Distinct, w.Duplicates())
		}
		checkCounters(t, conn, b.Schema, w, "idem_outbox")
	}
	for i, dedup := range []string{"retention", "token"} {
		for j, claim := range []string{bench.ClaimLease, bench.ClaimTx} {
			r := rep.Runs[2*i+j]
			if r.Claim != claim {
				t.Errorf("run %d claims by %q, want %q", 2*i+j, r.Claim, claim)
			}
			// A pre-filled queue is a backlog: with one lane the engine
			// claims it inside its units of work when it may.
			if claimed := r.ClaimedInTx > 0; claimed != (claim == bench.ClaimTx) {
				t.Errorf("run with claim %s claimed %d deliveries inside units of work, want %s", claim, r.ClaimedInTx, map[bool]string{true: "some", false: "none"}[claim == bench.ClaimTx])
			}
			checkRun(t, conn, r, w, dedup, keys, seed)
		}
	}
}

// checkRun checks one engine run of TestBenchSmallRun; a token run also
// leaves one token per emitted message (every incoming one claimed).
func checkRun(t *testing.T, conn *pgx.Conn, r bench.EngineRun, w *bench.Workload, dedup string, keys int, seed uint64) {
	t.Helper()
	if r.Dedup != dedup {
		t.Errorf("run has dedup %q, want %q", r.Dedup, dedup)
	}
	perMsg := []string{"idem_journal", "bench_emitted"}
	if dedup == "token" {
		perMsg = append(perMsg, "idem_tokens")
	}
	if r.Defaults || r.Batch != 10 || r.Lanes != 1 {
		t.Errorf("run has batch %d lanes %d, want 10 and 1", r.Batch, r.Lanes)
	}
	if r.TransitionsPerSec <= 0 || r.RoundTripsPerMsg <= 0 || r.RatioA <= 0 || r.RatioB <= 0 {
		t.Errorf("run %+v: want positive throughput, ratios and round trips", r)
	}
	if r.Applied != int64(w.Distinct) || r.Duplicates != int64(w.Duplicates()) || !r.ExactlyOnce {
		t.Errorf("run applied %d and skipped %d duplicates (exactly once: %v, problems %v); want %d and %d",
			r.Applied, r.Duplicates, r.ExactlyOnce, r.Problems, w.Distinct, w.Duplicates())
	}
	if r.LatencyWarmup != int(r.LatencyRate*0.1) || r.LatencyMessages != r.LatencyWarmup+max(100, int(r.LatencyRate*0.2)) {
		t.Errorf("latency phase: %d messages of which %d to warm up, at %.0f/s; want 100 ms of warm-up, then 200 ms measured", r.LatencyMessages, r.LatencyWarmup, r.LatencyRate)
	}
	if r.LatencyMessages < 100 || r.P50Ms <= 0 || r.P99Ms < r.P50Ms {
		t.Errorf("latency phase: %d messages, p50 %v ms, p99 %v ms; want at least 100 messages and 0 < p50 <= p99", r.LatencyMessages, r.P50Ms, r.P99Ms)
	}
	checkCounters(t, conn, r.Schema, w, perMsg...)
	checkCounters(t, conn, r.LatencySchema, bench.NewWorkload(r.LatencyMessages, keys, 0.2, seed+1, "l-"), perMsg...)
}

// checkCounters checks, independently of the report, that every key's
// counter in schema equals its number of distinct messages and that the
// inbox and each table in perMsg hold one row per distinct message.
func checkCounters(t *testing.T, conn *pgx.Conn, schema string, w *bench.Workload, perMsg ...string) {
	t.Helper()
	ctx := context.Background()
	s := pgx.Identifier{schema}.Sanitize()
	rows, err := conn.Query(ctx, `SELECT key, (data->>'n')::int FROM `+s+`.idem_instances WHERE saga_type = $1`, bench.SagaType)
	if err != nil {
		t.Errorf("%s: read counters: %v", schema, err)
		return
	}
	got := map[string]int{}
	sum := 0
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			t.Errorf("%s: read counters: %v", schema, err)
			return
		}
		got[k] = n
		sum += n
	}
	if sum != w.Distinct {
		t.Errorf("%s: counters add up to %d, want %d distinct messages", schema, sum, w.Distinct)
	}
	for k, want := range w.Expected {
		if name := "k-" + strconv.Itoa(k); got[name] != want {
			t.Errorf("%s: counter of %s is %d, want %d", schema, name, got[name], want)
		}
	}
	for _, table := range append([]string{"idem_inbox"}, perMsg...) {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM `+s+`.`+table).Scan(&n); err != nil {
			t.Errorf("%s: count %s: %v", schema, table, err)
		} else if n != w.Distinct {
			t.Errorf("%s: %s holds %d rows, want %d", schema, table, n, w.Distinct)
		}
	}
}

func TestBenchRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--store", ""}, "--store"},
		{[]string{"bench", "--store", "sqlite:///tmp/x.db"}, "postgres://"},
		{[]string{"bench", "--store", "postgres://u:secret@h/db", "--batch", "10,x"}, "--batch"},
		{[]string{"bench", "--store", "postgres://u@h/db", "--lanes", "0"}, "--lanes"},
		{[]string{"bench", "--store", "postgres://u@h/db", "--dup", "1"}, "--dup"},
		{[]string{"bench", "--store", "postgres://u@h/db", "--messages", "0"}, "--messages"},
		{[]string{"bench", "--store", "postgres://u@h/db", "--dedup", "retention,forever"}, "--dedup"},
		{[]string{"bench", "--store", "postgres://u@h/db", "--consumers", "1,0"}, "--consumers"},
		{[]string{"bench", "--store", "postgres://u@h/db", "--claim", "lease,forever"}, "--claim"},
		{[]string{"bench", "--store", "postgres://u@h/db", "--transport", "amqp://a:secret@h1/", "--transport", "amqp://a:secret@h2/"}, "given twice"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) || strings.Contains(errOut, "secret") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message naming %s, without the password", tc.args, code, errOut, tc.want)
		}
	}
}

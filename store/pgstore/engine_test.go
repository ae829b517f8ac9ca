package pgstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store/pgstore"
)

// The engine on PostgreSQL: the store is also the queue, so consumption,
// state, inbox, emitted messages and timers commit together.

// newEngine runs the shared counter workload's engine on st, which serves as
// store and queue.
func newEngine(t testing.TB, st *pgstore.Store, cfg *idem.Config) *idem.Engine {
	t.Helper()
	return enginetest.NewEngine(t, st, st, cfg)
}

// rows queries conn for the shared checks.
func rows(conn *pgx.Conn) enginetest.QueryRow {
	return func(q string, dest ...any) error { return conn.QueryRow(context.Background(), q).Scan(dest...) }
}

func schemaConn(t testing.TB, schema string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["search_path"] = schema
	conn, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// Three engines with separate pools on one database, fed every message three
// times: nothing applied twice, nothing lost, conflicts counted and retried.
func TestEnginesOnSeparatePoolsExactlyOnce(t *testing.T) {
	pgURL(t)
	first := openStore(t, pgstore.Config{Lease: 5 * time.Second})
	schema := first.Schema()
	var engines []*idem.Engine
	for i := range 3 {
		st := first
		if i > 0 {
			var err error
			st, err = pgstore.Open(context.Background(), pgURL(t), &pgstore.Config{Schema: schema, Lease: 5 * time.Second, MaxConns: 8})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
		}
		// The first engine runs three consumers on partitions of the keys.
		e := newEngine(t, st, &idem.Config{BatchSize: 16, Consumers: 1 + 2*boolInt(i == 0)})
		engines = append(engines, e)
	}
	const keys, perKey = 40, 5
	want := enginetest.Workload(t, engines[:1], keys, perKey, 3)
	for _, e := range engines {
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	conn := schemaConn(t, schema)
	enginetest.WaitSettled(t, rows(conn), 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, e := range engines {
		if err := e.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.CheckExactlyOnce(t, first, rows(conn), want, perKey)
	s := idem.SumStats(engines...)
	if s.Duplicates == 0 {
		t.Errorf("stats %+v: want duplicates skipped by the inbox", s)
	}
	if s.TimersFired != int64(keys) {
		t.Errorf("timers fired %d times by 3 polling replicas, want %d: once each", s.TimersFired, keys)
	}
	t.Logf("stats: %+v", s)
}

// TestMain doubles as the worker process of the multi-process test.
func TestMain(m *testing.M) {
	if os.Getenv("IDEM_PG_WORKER_SCHEMA") != "" {
		os.Exit(runWorker())
	}
	os.Exit(m.Run())
}

func runWorker() int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	st, err := pgstore.Open(ctx, os.Getenv("IDEM_TEST_PG_URL"), &pgstore.Config{Schema: os.Getenv("IDEM_PG_WORKER_SCHEMA"), Lease: 2 * time.Second, MaxConns: 8})
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	defer st.Close()
	e := newEngine(&workerTB{}, st, &idem.Config{BatchSize: 16})
	if err := e.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Stop(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker stop:", err)
		return 1
	}
	return 0
}

// workerTB lets the test helpers run in the worker process.
type workerTB struct{ testing.TB }

func (*workerTB) Helper() {}
func (*workerTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"worker:"}, args...)...)
	os.Exit(2)
}

// Three worker processes on one database, every message delivered three
// times, one worker killed with SIGKILL mid-run and restarted: every saga
// ends in its expected state, checked from the database.
func TestWorkerProcessesSurviveSIGKILL(t *testing.T) {
	url := pgURL(t)
	st := openStore(t, pgstore.Config{})
	schema := st.Schema()
	producer := newEngine(t, st, nil)
	conn := schemaConn(t, schema)

	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "IDEM_PG_WORKER_SCHEMA="+schema, "IDEM_TEST_PG_URL="+url)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	workers := []*exec.Cmd{start(), start(), start()}
	t.Cleanup(func() {
		for _, w := range workers {
			_ = w.Process.Kill()
			_ = w.Wait()
		}
	})

	const keys, perKey = 60, 8
	want := enginetest.Workload(t, []*idem.Engine{producer}, keys, perKey, 3)

	// Kill one worker once a third of the work is journaled, then restart it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM idem_journal`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n >= keys*perKey/3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers made no progress: %d journal entries", n)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
	if err := workers[0].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = workers[0].Wait()
	t.Log("worker 0 killed with SIGKILL; restarting it")
	workers[0] = start()

	enginetest.WaitSettled(t, rows(conn), 90*time.Second)
	for _, w := range workers {
		_ = w.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		if err := w.Wait(); err != nil {
			t.Errorf("worker exit: %v", err)
		}
	}
	workers = nil
	enginetest.CheckExactlyOnce(t, st, rows(conn), want, perKey)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

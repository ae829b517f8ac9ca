package pgstore_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/pgstore"
)

// The engine on PostgreSQL: the store is also the queue, so consumption,
// state, inbox, emitted messages and timers commit together.

type counter struct {
	Total int `json:"total"`
}

type inc struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

type added struct {
	Key   string `json:"key"`
	Total int    `json:"total"`
}

type tick struct {
	Key string `json:"key"`
}

func counterMachine() *saga.Machine[counter] {
	m := saga.New[counter]("counter")
	open := m.State("Open")
	incE := saga.NewEvent[inc](m, func(e inc) string { return e.Key })
	tickE := saga.NewEvent[tick](m, func(e tick) string { return e.Key })
	apply := func(c *saga.Context[counter], e inc) error {
		c.Data.Total += e.N
		c.Publish(added{Key: e.Key, Total: c.Data.Total})
		return nil
	}
	m.Initially(saga.When(incE).Then(apply).Then(func(c *saga.Context[counter], e inc) error {
		c.Schedule("tick", time.Millisecond, tick{Key: e.Key})
		return nil
	}).TransitionTo(open))
	m.During(open, saga.When(incE).Then(apply), saga.When(tickE).Then(func(c *saga.Context[counter], _ tick) error {
		c.Data.Total += 1000 // a timer's effect, countable
		return nil
	}))
	return m
}

// newEngine runs the counter saga and a no-op consumer of its events on st,
// which serves as store and queue.
func newEngine(t testing.TB, st *pgstore.Store, cfg *idem.Config) *idem.Engine {
	t.Helper()
	if cfg == nil {
		cfg = &idem.Config{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.TimerInterval == 0 {
		cfg.TimerInterval = 20 * time.Millisecond
	}
	e, err := idem.NewEngine(st, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(counterMachine()); err != nil {
		t.Fatal(err)
	}
	if err := e.Handle(saga.MessageType(added{}), func(context.Context, idem.Envelope) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return e
}

// workload publishes keys×perKey increments, each message copies times, and
// returns the expected total per key (timers add 1000 each).
func workload(t testing.TB, e *idem.Engine, keys, perKey, copies int) map[string]int {
	t.Helper()
	want := map[string]int{}
	var envs []idem.Envelope
	for i := range perKey {
		for k := range keys {
			key := fmt.Sprintf("k-%03d", k)
			env, err := e.NewEnvelope(fmt.Sprintf("inc-%s-%d", key, i), inc{Key: key, N: i + 1})
			if err != nil {
				t.Fatal(err)
			}
			want[key] += i + 1
			for range copies {
				envs = append(envs, env)
			}
		}
	}
	for k := range want {
		want[k] += 1000
	}
	for start := 0; start < len(envs); start += 500 {
		if err := e.Publish(context.Background(), envs[start:min(start+500, len(envs))]...); err != nil {
			t.Fatal(err)
		}
	}
	return want
}

// settled reports whether the queue and the timers are empty.
func settled(ctx context.Context, conn *pgx.Conn) (bool, error) {
	var queued, timers int
	err := conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM idem_queue), (SELECT count(*) FROM idem_timers)`).Scan(&queued, &timers)
	return queued == 0 && timers == 0, err
}

// checkExactlyOnce verifies, from the database, that every increment and
// timer applied once, every emitted event was consumed under its
// deterministic ID, and nothing was dead-lettered.
func checkExactlyOnce(t *testing.T, conn *pgx.Conn, want map[string]int, perKey int) {
	t.Helper()
	ctx := context.Background()
	rows, err := conn.Query(ctx, `SELECT key, (data->>'total')::int FROM idem_instances WHERE saga_type = 'counter'`)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for rows.Next() {
		var k string
		var total int
		if err := rows.Scan(&k, &total); err != nil {
			t.Fatal(err)
		}
		got[k] = total
	}
	if len(got) != len(want) {
		t.Errorf("sagas: got %d, want %d", len(got), len(want))
	}
	bad := 0
	for k, w := range want {
		if got[k] != w && bad < 5 {
			bad++
			t.Errorf("saga %s: total %d, want %d (an increment applied twice or lost)", k, got[k], w)
		}
	}
	var journal, distinctJournal, handled, dead int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(DISTINCT (key, message_id)) FROM idem_journal WHERE saga_type = 'counter'`).Scan(&journal, &distinctJournal); err != nil {
		t.Fatal(err)
	}
	if wantJ := len(want) * (perKey + 1); journal != wantJ || distinctJournal != wantJ {
		t.Errorf("journal: %d entries (%d distinct), want %d: each increment and timer applied once", journal, distinctJournal, wantJ)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM idem_inbox WHERE saga_type = 'idem.handler'`).Scan(&handled); err != nil {
		t.Fatal(err)
	}
	if wantH := len(want) * perKey; handled != wantH {
		t.Errorf("emitted events consumed: %d distinct IDs, want %d (one per increment)", handled, wantH)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM idem_dead_letters`).Scan(&dead); err != nil || dead != 0 {
		t.Errorf("dead letters: %d (%v), want 0", dead, err)
	}
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

func waitSettled(t *testing.T, conn *pgx.Conn, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := settled(context.Background(), conn)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue and timers not drained after %s", timeout)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
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
	want := workload(t, engines[0], keys, perKey, 3)
	for _, e := range engines {
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	conn := schemaConn(t, schema)
	waitSettled(t, conn, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, e := range engines {
		if err := e.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkExactlyOnce(t, conn, want, perKey)
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
	want := workload(t, producer, keys, perKey, 3)

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

	waitSettled(t, conn, 90*time.Second)
	for _, w := range workers {
		_ = w.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		if err := w.Wait(); err != nil {
			t.Errorf("worker exit: %v", err)
		}
	}
	workers = nil
	checkExactlyOnce(t, conn, want, perKey)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

package sqlitestore_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/sqlitestore"
)

// The engine on SQLite: the store is also the queue, so consumption, state,
// inbox, emitted messages and timers commit together.

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

// counterMachine adds each increment to its saga's total and publishes the
// new total; the first increment schedules a timer that adds 1000.
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
func newEngine(t testing.TB, st *sqlitestore.Store, cfg *idem.Config) *idem.Engine {
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

// workload publishes keys×perKey increments, each message copies times,
// copy c through publishers[c % len(publishers)], and returns the expected
// total per key (the timer adds 1000 to each).
func workload(t testing.TB, publishers []*idem.Engine, keys, perKey, copies int) map[string]int {
	t.Helper()
	want := map[string]int{}
	envs := make([][]idem.Envelope, len(publishers))
	for i := range perKey {
		for k := range keys {
			key := fmt.Sprintf("k-%03d", k)
			env, err := publishers[0].NewEnvelope(fmt.Sprintf("inc-%s-%d", key, i), inc{Key: key, N: i + 1})
			if err != nil {
				t.Fatal(err)
			}
			want[key] += i + 1
			for c := range copies {
				p := c % len(publishers)
				envs[p] = append(envs[p], env)
			}
		}
	}
	for k := range want {
		want[k] += 1000
	}
	for p, e := range publishers {
		for start := 0; start < len(envs[p]); start += 500 {
			if err := e.Publish(context.Background(), envs[p][start:min(start+500, len(envs[p]))]...); err != nil {
				t.Fatal(err)
			}
		}
	}
	return want
}

// settled reports whether the queue and the timers are empty.
func settled(db *sql.DB) (bool, error) {
	var queued, timers int
	err := db.QueryRow(`SELECT (SELECT count(*) FROM idem_queue), (SELECT count(*) FROM idem_timers)`).Scan(&queued, &timers)
	return queued == 0 && timers == 0, err
}

func waitSettled(t testing.TB, db *sql.DB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, err := settled(db)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue and timers not drained after %s", timeout)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
}

// checkExactlyOnce verifies, from the database file, that every increment
// and timer applied once, every emitted event was consumed under its
// deterministic ID, and nothing was dead-lettered.
func checkExactlyOnce(t *testing.T, db *sql.DB, want map[string]int, perKey int) {
	t.Helper()
	rows, err := db.Query(`SELECT key, data ->> '$.total' FROM idem_instances WHERE saga_type = 'counter'`)
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
	if err := rows.Err(); err != nil {
		t.Fatal(err)
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
	if err := db.QueryRow(`SELECT count(*), count(DISTINCT key || char(0) || message_id) FROM idem_journal WHERE saga_type = 'counter'`).Scan(&journal, &distinctJournal); err != nil {
		t.Fatal(err)
	}
	if wantJ := len(want) * (perKey + 1); journal != wantJ || distinctJournal != wantJ {
		t.Errorf("journal: %d entries (%d distinct), want %d: each increment and timer applied once", journal, distinctJournal, wantJ)
	}
	if err := db.QueryRow(`SELECT count(*) FROM idem_inbox WHERE saga_type = 'idem.handler'`).Scan(&handled); err != nil {
		t.Fatal(err)
	}
	if wantH := len(want) * perKey; handled != wantH {
		t.Errorf("emitted events consumed: %d distinct IDs, want %d (one per increment)", handled, wantH)
	}
	if err := db.QueryRow(`SELECT count(*) FROM idem_dead_letters`).Scan(&dead); err != nil || dead != 0 {
		t.Errorf("dead letters: %d (%v), want 0", dead, err)
	}
}

// Two Stores on one file, as two processes would open it, each with an
// engine, fed every message three times (through both stores, so that the
// copies of one message meet in different engines): nothing applied twice,
// nothing lost, checked from the file.
func TestEnginesOnSeparateStoresExactlyOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	cfg := &sqlitestore.Config{Lease: 5 * time.Second, PollInterval: 20 * time.Millisecond, Logger: quiet}
	var engines []*idem.Engine
	for range 2 {
		st, err := sqlitestore.Open(context.Background(), path, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		engines = append(engines, newEngine(t, st, &idem.Config{BatchSize: 16}))
	}
	const keys, perKey = 40, 5
	want := workload(t, engines, keys, perKey, 3)
	for _, e := range engines {
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	db := rawDB(t, path)
	waitSettled(t, db, 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, e := range engines {
		if err := e.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkExactlyOnce(t, db, want, perKey)
	s := idem.SumStats(engines...)
	if s.Duplicates == 0 {
		t.Errorf("stats %+v: want duplicates skipped by the inbox", s)
	}
	if s.TimersFired != int64(keys) {
		t.Errorf("timers fired %d times by 2 polling engines, want %d: once each", s.TimersFired, keys)
	}
	// Not asserted: SQLite's file locks are not fair, so a busy engine may
	// hold back the other's writes for a while (see the package docs).
	for i, e := range engines {
		t.Logf("engine %d: %+v", i, e.Stats())
	}
}

// BenchmarkEngineSQLite measures saga transitions per second through the
// whole pipeline on one SQLite file that is store and queue: claim, load,
// dedup, apply, one durable commit per lane with inbox, journal, the
// consumed delivery and the emitted event, which a no-op handler then
// consumes too. One op is one increment; keys repeat, so most transitions
// update an existing saga.
//
//	go test -run '^$' -bench BenchmarkEngineSQLite ./store/sqlitestore
func BenchmarkEngineSQLite(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run("batch="+strconv.Itoa(batch), func(b *testing.B) {
			benchEngine(b, batch)
		})
	}
}

func benchEngine(b *testing.B, batch int) {
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, filepath.Join(b.TempDir(), "idem.db"), &sqlitestore.Config{Lease: time.Minute, Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	e := newEngine(b, st, &idem.Config{BatchSize: batch, TimerInterval: time.Hour})
	envs := make([]idem.Envelope, b.N)
	for i := range envs {
		key := "k-" + strconv.Itoa(i%1024)
		if envs[i], err = e.NewEnvelope("m-"+strconv.Itoa(i), inc{Key: key, N: 1}); err != nil {
			b.Fatal(err)
		}
	}
	for start := 0; start < len(envs); start += 1000 {
		if err := st.Publish(ctx, envs[start:min(start+1000, len(envs))]); err != nil {
			b.Fatal(err)
		}
	}
	db := rawDB(b, st.Path())
	b.ResetTimer()
	start := time.Now()
	if err := e.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for {
		var queued bool
		if err := db.QueryRow(`SELECT EXISTS (SELECT 1 FROM idem_queue)`).Scan(&queued); err != nil {
			b.Fatal(err)
		}
		if !queued {
			break
		}
		time.Sleep(time.Millisecond) // polling a condition
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if err := e.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	if got, want := e.Stats().Applied, int64(2*b.N); got != want {
		b.Fatalf("applied %d, want %d (increments and their events)", got, want)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "transitions/s")
	b.ReportMetric(elapsed.Seconds()*1e6/float64(b.N), "µs/transition")
}

// TestMain doubles as the worker process of the multi-process test.
func TestMain(m *testing.M) {
	if path := os.Getenv("IDEM_SQLITE_WORKER_DB"); path != "" {
		os.Exit(runWorker(path))
	}
	os.Exit(m.Run())
}

func runWorker(path string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	st, err := sqlitestore.Open(ctx, path, &sqlitestore.Config{Lease: 2 * time.Second, PollInterval: 20 * time.Millisecond, Logger: quiet})
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

// Three worker processes on one file, every message delivered three times,
// one worker killed with SIGKILL mid-run (possibly inside a write
// transaction) and restarted: every saga ends in its expected state,
// checked from the file.
func TestWorkerProcessesSurviveSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes; skipped with -short")
	}
	st := openStore(t, sqlitestore.Config{})
	path := st.Path()
	producer := newEngine(t, st, nil)
	db := rawDB(t, path)

	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), "IDEM_SQLITE_WORKER_DB="+path)
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
	want := workload(t, []*idem.Engine{producer}, keys, perKey, 3)

	// Kill one worker once a third of the work is journaled, then restart it.
	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		if err := db.QueryRow(`SELECT count(*) FROM idem_journal`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n >= keys*perKey/3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers made no progress: %d journal entries", n)
		}
		time.Sleep(2 * time.Millisecond) // polling a condition with a deadline
	}
	if err := workers[0].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = workers[0].Wait()
	t.Log("worker 0 killed with SIGKILL; restarting it")
	workers[0] = start()

	waitSettled(t, db, 90*time.Second)
	for _, w := range workers {
		_ = w.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		if err := w.Wait(); err != nil {
			t.Errorf("worker exit: %v", err)
		}
	}
	workers = nil
	checkExactlyOnce(t, db, want, perKey)
}

package sqlitestore_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginestats"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/store/storetest"
)

// The engine on SQLite: the store is also the queue, so consumption, state,
// inbox, emitted messages and timers commit together.

// newEngine runs the shared counter workload's engine on st, which serves as
// store and queue.
func newEngine(t testing.TB, st *sqlitestore.Store, cfg *idem.Config) *idem.Engine {
	t.Helper()
	return enginetest.NewEngine(t, st, st, cfg)
}

// rows queries db for the shared checks.
func rows(db *sql.DB) enginetest.QueryRow {
	return func(q string, dest ...any) error { return db.QueryRow(q).Scan(dest...) }
}

// Two Stores on one file, as two processes would open it, each with an
// engine, fed every message three times (through both stores, so that the
// copies of one message meet in different engines): nothing applied twice,
// nothing lost, checked from the file.
func TestEnginesOnSeparateStoresExactlyOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "idem.db")
	cfg := &sqlitestore.Config{Lease: 5 * time.Second, PollInterval: 20 * time.Millisecond, Logger: quiet}
	var engines []*idem.Engine
	var first *sqlitestore.Store
	for range 2 {
		st, err := sqlitestore.Open(context.Background(), path, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		if first == nil {
			first = st
		}
		engines = append(engines, newEngine(t, st, &idem.Config{BatchSize: 16}))
	}
	const keys, perKey = 40, 5
	want := enginetest.Workload(t, engines, keys, perKey, 3)
	for _, e := range engines {
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	db := rawDB(t, path)
	enginetest.WaitSettled(t, rows(db), 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, e := range engines {
		if err := e.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.CheckExactlyOnce(t, first, rows(db), want, perKey)
	s := enginestats.Sum(engines...)
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
		if envs[i], err = e.NewEnvelope("m-"+strconv.Itoa(i), enginetest.Inc{Key: key, N: 1}); err != nil {
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
	return enginetest.RunWorker(func(ctx context.Context) (store.Queue, error) {
		return sqlitestore.Open(ctx, path, &sqlitestore.Config{Lease: 2 * time.Second, PollInterval: 20 * time.Millisecond, Logger: quiet})
	})
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
	enginetest.SurviveSIGKILL(t, st, newEngine(t, st, nil), rows(rawDB(t, st.Path())), "IDEM_SQLITE_WORKER_DB="+st.Path())
}

// TestWorkerStoppedAtOnceExitsCleanly: a worker process sent SIGTERM as
// soon as StartWorker returns stops cleanly (exit 0). Before StartWorker
// waited for the worker to install its SIGTERM handler, a worker stopped
// that early (a restarted worker in SurviveSIGKILL, once the others had
// drained the queue) died of the signal: "worker exit: signal:
// terminated".
func TestWorkerStoppedAtOnceExitsCleanly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts worker processes; skipped with -short")
	}
	st := openStore(t, sqlitestore.Config{})
	for range 5 {
		w := enginetest.StartWorker(t, "IDEM_SQLITE_WORKER_DB="+st.Path())
		if err := w.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		if err := w.Wait(); err != nil {
			t.Fatalf("worker stopped right after its start: %v, want exit 0", err)
		}
	}
}

// Schedules on SQLite: each tick published once by concurrent pollers, in
// the unit of work that advances the schedule.
func TestEngineSchedulesFireOnce(t *testing.T) {
	st := openStore(t, sqlitestore.Config{})
	enginetest.SchedulesFireOnce(t, st, st)
}

// A saga is searchable by its attribute once a message is applied, in the
// same commit; a value SQLite could keep but PostgreSQL could not is
// dead-lettered all the same.
func TestEngineAttributesSearchable(t *testing.T) {
	t.Parallel()
	enginetest.Attributes(t, openStore(t, sqlitestore.Config{Lease: 5 * time.Second, PollInterval: 20 * time.Millisecond}))
}

// The zero Config runs one consumer on SQLite's single writer, and keeps
// what the caller set.
func TestEngineDefaultsToOneConsumer(t *testing.T) {
	t.Parallel()
	st := openStore(t, sqlitestore.Config{})
	if got := newEngine(t, st, nil).Config().Consumers; got != 1 {
		t.Errorf("zero Config on SQLite: Consumers %d, want 1", got)
	}
	if got := newEngine(t, st, &idem.Config{Consumers: 3}).Config().Consumers; got != 3 {
		t.Errorf("Consumers 3 on SQLite: got %d, want the 3 given", got)
	}
}

// The engine admits a plain handler's messages under a concurrency cap per
// tenant, and releases every slot (enginetest.Flow). The lease is an
// hour, renewed while a call runs: a slot leaked by a settle that did not
// release it would stay held past the test, not expire.
func TestEngineFlowControl(t *testing.T) {
	enginetest.Flow(t, openStore(t, sqlitestore.Config{Lease: time.Hour, PollInterval: 20 * time.Millisecond}))
}

// A cap raised at runtime admits a waiting message although nothing was
// released (enginetest.FlowChange).
func TestEngineFlowControlChangedAtRuntime(t *testing.T) {
	enginetest.FlowChange(t, openStore(t, sqlitestore.Config{Lease: time.Hour, PollInterval: time.Hour}))
}

// TestEngineFairShare: a quiet tenant's calls overtake a flooding
// tenant's backlog in fair order (enginetest.FlowFair).
func TestEngineFairShare(t *testing.T) {
	enginetest.FlowFair(t, openStore(t, sqlitestore.Config{Lease: time.Hour, PollInterval: 20 * time.Millisecond}))
}

// BenchmarkFairShare: a quiet tenant's latency alone, behind a flood of
// 5,000 messages in the queue's order, and behind it in fair order
// (storetest.BenchFairShare; docs/benchmarks.md).
func BenchmarkFairShare(b *testing.B) {
	storetest.BenchFairShare(b, func(tb testing.TB) store.AdmittingQueue {
		return openStore(tb, sqlitestore.Config{PollInterval: 5 * time.Millisecond})
	}, 5000)
}

// A deploy check of changed builds against live sagas finds each hazard
// with its count, and the start-up gate refuses one.
func TestEngineDeployCheck(t *testing.T) {
	t.Parallel()
	enginetest.Deploy(t, openStore(t, sqlitestore.Config{Lease: 5 * time.Second, PollInterval: 20 * time.Millisecond}))
}

// A replica of an old build gives back a message for a saga in a state
// only the new build knows, until a replica of the new build handles it.
func TestEngineDeployMixedFleet(t *testing.T) {
	t.Parallel()
	enginetest.DeployMixedFleet(t, openStore(t, sqlitestore.Config{Lease: 5 * time.Second, PollInterval: 20 * time.Millisecond}))
}

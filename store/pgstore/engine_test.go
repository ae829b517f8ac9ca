package pgstore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginestats"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
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
func schemaConn(t testing.TB, schema string) *pgx.Conn {
	t.Helper()
	return enginetest.SchemaConn(t, testenv.PostgresURL(t), schema)
}

// Three engines with separate pools on one database, fed every message three
// times: nothing applied twice, nothing lost, conflicts counted and retried.
func TestEnginesOnSeparatePoolsExactlyOnce(t *testing.T) {
	testenv.PostgresURL(t)
	first := openStore(t, pgstore.Config{Lease: 5 * time.Second})
	schema := first.Schema()
	var engines []*idem.Engine
	for i := range 3 {
		st := first
		if i > 0 {
			var err error
			st, err = pgstore.Open(context.Background(), testenv.PostgresURL(t), &pgstore.Config{Schema: schema, Lease: 5 * time.Second, MaxConns: 8})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = st.Close() })
		}
		// The first engine runs three consumers on partitions of the keys.
		consumers := 1
		if i == 0 {
			consumers = 3
		}
		// Two lanes, shared by the consumers: every pool fits 2 + 3.
		e := newEngine(t, st, &idem.Config{BatchSize: 16, Consumers: consumers, PartitionedReceive: true, Lanes: 2})
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
	enginetest.WaitSettled(t, enginetest.Rows(conn), 60*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, e := range engines {
		if err := e.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.CheckExactlyOnce(t, first, enginetest.Rows(conn), want, perKey)
	s := enginestats.Sum(engines...)
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
	if os.Getenv(scheduleWorkerEnv) != "" {
		os.Exit(runScheduleWorker())
	}
	if os.Getenv(sagaWorkerEnv) != "" {
		os.Exit(runSagaWorker())
	}
	os.Exit(m.Run())
}

func runWorker() int {
	return enginetest.RunWorker(func(ctx context.Context) (store.Queue, error) {
		return pgstore.Open(ctx, os.Getenv("IDEM_TEST_PG_URL"), &pgstore.Config{Schema: os.Getenv("IDEM_PG_WORKER_SCHEMA"), Lease: 2 * time.Second})
	})
}

// Three worker processes on one database, every message delivered three
// times, one worker killed with SIGKILL mid-run and restarted: every saga
// ends in its expected state, checked from the database.
func TestWorkerProcessesSurviveSIGKILL(t *testing.T) {
	url := testenv.PostgresURL(t)
	st := openStore(t, pgstore.Config{})
	conn := schemaConn(t, st.Schema())
	enginetest.SurviveSIGKILL(t, st, newEngine(t, st, nil), enginetest.Rows(conn), "IDEM_PG_WORKER_SCHEMA="+st.Schema(), "IDEM_TEST_PG_URL="+url)
}

// Schedules on PostgreSQL: each tick published once by concurrent pollers
// (FOR UPDATE SKIP LOCKED and the guarded advance), in the unit of work
// that advances the schedule.
func TestEngineSchedulesFireOnce(t *testing.T) {
	st := openStore(t, pgstore.Config{})
	enginetest.SchedulesFireOnce(t, st, st)
}

// A saga is searchable by its attribute once a message is applied, in the
// same commit, and a value PostgreSQL cannot keep is dead-lettered.
func TestEngineAttributesSearchable(t *testing.T) {
	t.Parallel()
	enginetest.Attributes(t, openStore(t, pgstore.Config{Lease: 5 * time.Second}))
}

// The engine admits a plain handler's messages under a concurrency cap per
// tenant, and releases every slot (enginetest.Flow). The lease is an
// hour, renewed while a call runs: a slot leaked by a settle that did not
// release it would stay held past the test, not expire.
func TestEngineFlowControl(t *testing.T) {
	t.Parallel()
	enginetest.Flow(t, openStore(t, pgstore.Config{Lease: time.Hour, PollInterval: 20 * time.Millisecond}))
}

// A cap raised at runtime admits a waiting message although nothing was
// released (enginetest.FlowChange).
func TestEngineFlowControlChangedAtRuntime(t *testing.T) {
	t.Parallel()
	enginetest.FlowChange(t, openStore(t, pgstore.Config{Lease: time.Hour, PollInterval: time.Hour}))
}

// TestEngineFairShare: a quiet tenant's calls overtake a flooding
// tenant's backlog in fair order (enginetest.FlowFair).
func TestEngineFairShare(t *testing.T) {
	enginetest.FlowFair(t, openStore(t, pgstore.Config{Lease: time.Hour, PollInterval: 20 * time.Millisecond}))
}

// A deploy check of changed builds against live sagas finds each hazard
// with its count, and the start-up gate refuses one.
func TestEngineDeployCheck(t *testing.T) {
	t.Parallel()
	enginetest.Deploy(t, openStore(t, pgstore.Config{Lease: 5 * time.Second, PollInterval: 20 * time.Millisecond}))
}

// A replica of an old build gives back a message for a saga in a state
// only the new build knows, until a replica of the new build handles it.
func TestEngineDeployMixedFleet(t *testing.T) {
	t.Parallel()
	enginetest.DeployMixedFleet(t, openStore(t, pgstore.Config{Lease: 5 * time.Second, PollInterval: 20 * time.Millisecond}))
}

// The eager pass racing the new build's engine migrates each saga once.
func TestEagerMigrationRacesTheEngine(t *testing.T) {
	t.Parallel()
	enginetest.EagerMigration(t, openStore(t, pgstore.Config{Lease: 5 * time.Second, PollInterval: 5 * time.Millisecond}))
}

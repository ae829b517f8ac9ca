package redisstreams_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginestats"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/redisstreams"
)

// The engine on PostgreSQL with Redis Streams as its transport:
// consumption cannot commit with the state, so the inbox (duplicates) and
// the outbox relay (emitted messages) carry exactly-once.

// openPG returns a store on a fresh schema, dropped when the test ends,
// and a way to query it.
func openPG(t testing.TB) (*pgstore.Store, enginetest.QueryRow) {
	t.Helper()
	url := testenv.PostgresURL(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "t_redis_" + hex.EncodeToString(b)
	ctx := context.Background()
	st, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: schema, Migrate: true, MaxConns: 16})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	conn := enginetest.SchemaConn(t, url, schema) // closed after the cleanup below
	t.Cleanup(func() {
		_ = st.Close()
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return st, enginetest.Rows(conn)
}

// settled reports whether nothing is in flight: nothing ready or unacked
// in any process, no unsent outbox row, no timer.
func settled(tr *redisstreams.Transport, q enginetest.QueryRow) func() (bool, error) {
	return func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ready, unacked, err := tr.Pending(ctx)
		if err != nil {
			return false, nil // the server may be restarting; poll again
		}
		var unsent, timers int
		if err := q(`SELECT (SELECT count(*) FROM idem_outbox WHERE sent_at IS NULL), (SELECT count(*) FROM idem_timers)`, &unsent, &timers); err != nil {
			return false, err
		}
		return ready == 0 && unacked == 0 && unsent == 0 && timers == 0, nil
	}
}

// workerLease is the lease of the engine tests: short, so that the
// deliveries of a killed worker come back quickly.
const workerLease = 2 * time.Second

// Three engines on one PostgreSQL and one namespace (the first with three
// consumers, on a partition count they do not divide), every message
// published three times: every increment and timer applies once.
func TestEngineExactlyOnceOnPostgres(t *testing.T) {
	testenv.RedisURL(t)
	st, q := openPG(t)
	ns := namespace(t)
	var engines []*idem.Engine
	var first *redisstreams.Transport
	for i := range 3 {
		tr := open(t, redisstreams.Config{Namespace: ns, Partitions: 4, Lease: 10 * time.Second})
		consumers := 1
		if i == 0 {
			first, consumers = tr, 3
		}
		engines = append(engines, enginetest.NewEngine(t, st, tr, &idem.Config{BatchSize: 16, Consumers: consumers, Lanes: 2, RelayInterval: 100 * time.Millisecond, RelayAge: time.Second}))
	}
	const keys, perKey = 40, 5
	want := enginetest.Workload(t, engines, keys, perKey, 3)
	for _, e := range engines {
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.WaitFor(t, 60*time.Second, "streams, outbox and timers drained", settled(first, q))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, e := range engines {
		if err := e.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.CheckExactlyOnce(t, st, q, want, perKey)
	s := enginestats.Sum(engines...)
	if s.Duplicates == 0 {
		t.Errorf("stats %+v: want duplicates skipped by the inbox", s)
	}
	t.Logf("stats: %+v", s)
}

// Entries another program wrote into a stream are dead-lettered by the
// engine, once each, and removed: they do not come back.
func TestEngineDeadLettersForeignEntries(t *testing.T) {
	ns := namespace(t)
	tr := open(t, redisstreams.Config{Namespace: ns, Partitions: 2, Lease: 10 * time.Second})
	st := memstore.New(nil)
	e := enginetest.NewEngine(t, st, tr, &idem.Config{Lanes: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	c := rawClient(t)
	ctx := context.Background()
	for i, s := range tr.Streams() {
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: s, Values: []any{"junk", i}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := e.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	var dead []store.DeadLetter
	enginetest.WaitFor(t, 30*time.Second, "two dead letters and nothing left in the streams", func() (bool, error) {
		var err error
		if dead, err = st.ListDeadLetters(ctx, nil); err != nil {
			return false, err
		}
		ready, unacked, err := tr.Pending(ctx)
		return len(dead) == 2 && ready == 0 && unacked == 0 && e.Stats().DeadLettered >= 2, err
	})
	for _, d := range dead {
		if !strings.HasPrefix(d.Envelope.ID, "redis:{"+ns+"}:p") || d.Reason != idem.ReasonUnknownType || !strings.Contains(string(d.Envelope.Body), `"junk"`) {
			t.Errorf("dead letter %s: reason %s, body %s; want an unknown_type letter keeping the entry's fields", d.Envelope.ID, d.Reason, d.Envelope.Body)
		}
	}
	if s := e.Stats(); s.DeadLettered != 2 {
		t.Errorf("stats %+v: want 2 dead-lettered, each once", s)
	}
}

// TestMain doubles as the worker process of the multi-process test.
func TestMain(m *testing.M) {
	if os.Getenv("IDEM_REDIS_WORKER_NS") != "" {
		os.Exit(enginetest.RunWorkerOn(func(ctx context.Context) (store.Store, transport.Transport, error) {
			st, err := pgstore.Open(ctx, os.Getenv("IDEM_TEST_PG_URL"), &pgstore.Config{Schema: os.Getenv("IDEM_REDIS_WORKER_SCHEMA"), MaxConns: 8})
			if err != nil {
				return nil, nil, err
			}
			// A worker started while the test restarts the server waits for
			// it, as a process supervisor would restart it: Open itself
			// refuses an unreachable server.
			var tr *redisstreams.Transport
			deadline := time.Now().Add(30 * time.Second)
			for {
				tr, err = redisstreams.Open(ctx, os.Getenv("IDEM_REDIS_WORKER_URL"), &redisstreams.Config{Namespace: os.Getenv("IDEM_REDIS_WORKER_NS"), Partitions: 4, Lease: workerLease,
					ReconnectMax: 500 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
				if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
					break
				}
				time.Sleep(100 * time.Millisecond) // polling for the server to come back, with a deadline
			}
			if err != nil {
				_ = st.Close()
				return nil, nil, err
			}
			return st, tr, nil
		}))
	}
	os.Exit(m.Run())
}

// Three worker processes on PostgreSQL and Redis, every message published
// three times, one worker killed with SIGKILL mid-run and restarted, then
// the Redis server killed with SIGKILL and started again on its
// append-only file: every saga ends in its expected state, nothing is left
// in the streams, the outbox or the timers. The server is the test's own
// (scripts/test's torture run restarts the shared one), so that the crash
// does not disturb the tests of other packages running meanwhile.
func TestWorkerProcessesSurviveSIGKILLAndRedisRestart(t *testing.T) {
	s := startServer(t)
	st, q := openPG(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := redisstreams.Open(ctx, s.url(), &redisstreams.Config{Partitions: 4, Lease: workerLease, ReconnectMax: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	producer := enginetest.NewEngine(t, st, tr, nil)
	enginetest.SurviveSIGKILLOn(t, enginetest.KillRun{
		Store:    st,
		Producer: producer,
		Query:    q,
		Env:      []string{"IDEM_REDIS_WORKER_NS=idem", "IDEM_REDIS_WORKER_URL=" + s.url(), "IDEM_REDIS_WORKER_SCHEMA=" + st.Schema()},
		Settled:  settled(tr, q),
		Disrupt: func(t *testing.T) {
			start := time.Now()
			s.crash(t)
			s.start(t)
			t.Logf("Redis killed with SIGKILL and started again in %v", time.Since(start).Round(time.Millisecond))
		},
	})
}

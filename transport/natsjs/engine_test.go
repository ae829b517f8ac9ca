package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginestats"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport/natsjs"
	"github.com/idemhq/idem/transport/natsjs/natsembed"
)

// The engine on PostgreSQL with JetStream as its transport: consumption
// cannot commit with the state, so the inbox (duplicates) and the outbox
// relay (emitted messages) carry exactly-once.

// openPG returns a store on a fresh schema, dropped when the test ends, and
// a connection to query it.
func openPG(t testing.TB) (*pgstore.Store, enginetest.QueryRow) {
	t.Helper()
	url := testenv.PostgresURL(t)
	schema := randName("t_")
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

// settled reports whether nothing is in flight: no message waiting in or
// held from the consumer, no unsent outbox row, no timer. A message moves
// between the stream and the outbox (consumed, its effects committed with
// the outbox rows they emit, then those published) while they are read
// one after the other, so one empty reading proves nothing: settled
// reports true only once every reading for a second or more found
// everything empty.
func settled(tr *natsjs.Transport, q enginetest.QueryRow) func() (bool, error) {
	var emptySince time.Time
	return func() (bool, error) {
		empty, err := func() (bool, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			ready, unacked, err := tr.Pending(ctx)
			if err != nil {
				return false, nil // the broker may be restarting; poll again
			}
			var unsent, timers int
			if err := q(`SELECT (SELECT count(*) FROM idem_outbox WHERE sent_at IS NULL), (SELECT count(*) FROM idem_timers)`, &unsent, &timers); err != nil {
				return false, err
			}
			return ready == 0 && unacked == 0 && unsent == 0 && timers == 0, nil
		}()
		switch {
		case err != nil || !empty:
			emptySince = time.Time{}
			return false, err
		case emptySince.IsZero():
			emptySince = time.Now()
			return false, nil
		}
		return time.Since(emptySince) >= time.Second, nil
	}
}

// Three engines on one PostgreSQL and one stream, every message published
// three times: every increment and timer applies once.
func TestEngineExactlyOnceOnPostgres(t *testing.T) {
	st, q := openPG(t)
	stream := randName("E_")
	var engines []*idem.Engine
	var first *natsjs.Transport
	for i := range 3 {
		tr := open(t, natsjs.Config{Stream: stream, AckWait: workerAckWait})
		if i == 0 {
			first = tr
		}
		engines = append(engines, enginetest.NewEngine(t, st, tr, &idem.Config{BatchSize: 16, Lanes: 2, Consumers: 4, PartitionedReceive: true, RelayInterval: 50 * time.Millisecond, RelayAge: time.Second}))
	}
	const keys, perKey = 40, 5
	want := enginetest.Workload(t, engines, keys, perKey, 3)
	for _, e := range engines {
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.WaitFor(t, 60*time.Second, "stream, outbox and timers drained", settled(first, q))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, e := range engines {
		if err := e.Stop(ctx); err != nil {
			t.Fatal(err)
		}
	}
	enginetest.CheckExactlyOnce(t, st, q, want, perKey)
	t.Logf("stats: %+v", enginestats.Sum(engines...))
}

// Three worker processes on one PostgreSQL and the test's embedded
// nats-server, every message published three times, one worker killed with
// SIGKILL mid-run and restarted, then the broker shut down and started
// again on the same port and storage: every saga ends in its expected
// state, and the stream, the outbox and the timers drain.
func TestWorkerProcessesSurviveSIGKILLAndBrokerRestart(t *testing.T) {
	url := testenv.PostgresURL(t)
	st, q := openPG(t)
	dir := t.TempDir()
	srv, err := natsembed.Start(context.Background(), dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown() })
	port := srv.Port()
	stream := randName("W_")
	tr, err := natsjs.Open(context.Background(), srv.URL(), &natsjs.Config{Stream: stream, AckWait: workerAckWait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	producer := enginetest.NewEngine(t, st, tr, nil)

	enginetest.SurviveSIGKILLOn(t, enginetest.KillRun{
		Store:    st,
		Producer: producer,
		Query:    q,
		Env: []string{
			"IDEM_TEST_PG_URL=" + url,
			"IDEM_PG_WORKER_SCHEMA=" + st.Schema(),
			"IDEM_NATS_WORKER_URL=" + srv.URL(),
			"IDEM_NATS_WORKER_STREAM=" + stream,
		},
		Settled: settled(tr, q),
		Disrupt: func(t *testing.T) {
			// Restart the broker once the restarted worker is connected too
			// (five connections made: the producer, three workers and the
			// restarted one; four open), so that all of them see it go.
			enginetest.WaitFor(t, 30*time.Second, "restarted worker connected", func() (bool, error) {
				vz, err := srv.NATS().Varz(nil)
				if err != nil {
					return false, err
				}
				return vz.TotalConnections >= 5 && srv.NATS().NumClients() >= 4, nil
			})
			srv.Shutdown()
			t.Log("nats-server shut down; starting it again on the same port and storage")
			srv, err = natsembed.Start(context.Background(), dir, &natsembed.Config{Port: port})
			if err != nil {
				t.Fatal(err)
			}
		},
	})
}

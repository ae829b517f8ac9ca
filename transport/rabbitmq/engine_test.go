package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginestats"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/rabbitmq"
)

// openStore returns a pgstore on a fresh schema, dropped when the test ends.
func openStore(t testing.TB) *pgstore.Store {
	t.Helper()
	url := testenv.PostgresURL(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "t_rmq_" + hex.EncodeToString(b)
	ctx := context.Background()
	s, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: schema, Migrate: true, MaxConns: 16})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA "+schema+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return s
}

// query reads the store's schema.
func query(t testing.TB, schema string) enginetest.QueryRow {
	t.Helper()
	return enginetest.Rows(enginetest.SchemaConn(t, testenv.PostgresURL(t), schema))
}

// brokerMessages counts the messages (ready and unacknowledged) in the
// namespace's queues, from rabbitmqctl. complete is false when the output
// lacks one of the namespace's partition queues (of which there are
// partitions), or has a line it cannot read: under load, rabbitmqctl may
// leave out a queue that did not answer in time, and such a count must not
// pass for an empty broker.
func brokerMessages(t testing.TB, ns string, partitions int) (n int, complete bool, err error) {
	out, err := exec.Command(hook(t, "IDEM_TEST_AMQP_CTL"), "list_queues", "-q", "--no-table-headers", "name", "messages").CombinedOutput()
	if err != nil {
		return 0, false, fmt.Errorf("rabbitmqctl list_queues: %v: %s", err, out)
	}
	seen := map[string]bool{}
	complete = true
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case len(f) != 2:
			complete = false
			continue
		case !strings.HasPrefix(f[0], ns+".") || f[0] == ns+".dead":
			continue
		}
		c, err := strconv.Atoi(f[1])
		if err != nil {
			complete = false
			continue
		}
		seen[f[0]] = true
		n += c
	}
	for i := range partitions {
		if !seen[fmt.Sprintf("%s.p%d", ns, i)] {
			complete = false
		}
	}
	return n, complete, nil
}

// settled reports whether the broker's queues, the outbox and the timers
// are empty: nothing is left in flight anywhere. A message moves between
// the broker and the outbox (consumed, its effects committed with the
// outbox rows they emit, then those published) while the three are read
// one after the other, so one empty reading proves nothing: settled
// reports true only once every reading for a second or more found
// everything empty.
func settled(t testing.TB, q enginetest.QueryRow, ns string, partitions int) func() (bool, error) {
	var emptySince time.Time
	return func() (bool, error) {
		empty, err := func() (bool, error) {
			var outbox, timers int
			if err := q(`SELECT (SELECT count(*) FROM idem_outbox WHERE sent_at IS NULL), (SELECT count(*) FROM idem_timers)`, &outbox, &timers); err != nil {
				return false, err
			}
			if outbox > 0 || timers > 0 {
				return false, nil
			}
			n, complete, err := brokerMessages(t, ns, partitions)
			return n == 0 && complete, err
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

// PostgreSQL store, RabbitMQ transport: three engines (the first with
// three consumers on partitions of the keys), every message published three
// times: nothing applied twice, nothing lost.
func TestEngineOnPostgresExactlyOnce(t *testing.T) {
	testenv.AMQPURL(t)
	st := openStore(t)
	ns := namespace(t, 4)
	var engines []*idem.Engine
	for i := range 3 {
		tr := open(t, rabbitmq.Config{Namespace: ns, Partitions: 4, Prefetch: 32, Lease: 10 * time.Second})
		consumers := 1
		if i == 0 {
			consumers = 3
		}
		engines = append(engines, enginetest.NewEngine(t, st, tr, &idem.Config{BatchSize: 16, Consumers: consumers, Lanes: 2, RelayInterval: 100 * time.Millisecond, RelayAge: time.Second}))
	}
	const keys, perKey = 40, 5
	want := enginetest.Workload(t, engines[:1], keys, perKey, 3)
	for _, e := range engines {
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	q := query(t, st.Schema())
	enginetest.WaitFor(t, 60*time.Second, "broker queues, outbox and timers drained", settled(t, q, ns, 4))
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

// TestMain doubles as the worker process of the multi-process test.
func TestMain(m *testing.M) {
	if os.Getenv("IDEM_RMQ_WORKER_NS") != "" {
		os.Exit(enginetest.RunWorkerOn(func(ctx context.Context) (store.Store, transport.Transport, error) {
			st, err := pgstore.Open(ctx, os.Getenv("IDEM_TEST_PG_URL"), &pgstore.Config{Schema: os.Getenv("IDEM_RMQ_WORKER_SCHEMA"), MaxConns: 8})
			if err != nil {
				return nil, nil, err
			}
			tr, err := rabbitmq.Open(ctx, os.Getenv("IDEM_TEST_AMQP_URL"), &rabbitmq.Config{Namespace: os.Getenv("IDEM_RMQ_WORKER_NS"), Partitions: 4, Prefetch: 32, Lease: 10 * time.Second,
				Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))})
			if err != nil {
				_ = st.Close()
				return nil, nil, err
			}
			return st, tr, nil
		}))
	}
	os.Exit(m.Run())
}

// Three worker processes on PostgreSQL and RabbitMQ, every message
// published three times, one worker killed with SIGKILL mid-run and
// restarted, then the broker restarted: every saga ends in its expected
// state, nothing left in the broker, the outbox or the timers.
func TestWorkerProcessesSurviveSIGKILLAndBrokerRestart(t *testing.T) {
	testenv.AMQPURL(t)
	restart := hook(t, "IDEM_TEST_AMQP_RESTART")
	hook(t, "IDEM_TEST_AMQP_CTL")
	st := openStore(t)
	ns := namespace(t, 4)
	tr := open(t, rabbitmq.Config{Namespace: ns, Partitions: 4})
	producer := enginetest.NewEngine(t, st, tr, nil)
	q := query(t, st.Schema())
	enginetest.SurviveSIGKILLOn(t, enginetest.KillRun{
		Store:    st,
		Producer: producer,
		Query:    q,
		Env:      []string{"IDEM_RMQ_WORKER_NS=" + ns, "IDEM_RMQ_WORKER_SCHEMA=" + st.Schema()},
		Settled:  settled(t, q, ns, 4),
		Disrupt: func(t *testing.T) {
			start := time.Now()
			if out, err := exec.Command(restart).CombinedOutput(); err != nil {
				t.Fatalf("restarting RabbitMQ: %v\n%s", err, out)
			}
			t.Logf("RabbitMQ restarted in %v", time.Since(start).Round(time.Millisecond))
		},
	})
}

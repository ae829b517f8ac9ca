package kafka_test

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

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginestats"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/kafka"
)

// The engine on PostgreSQL with Kafka (kfake standing in for a cluster)
// as its transport: consumption cannot commit with the state, so the
// inbox (duplicates, and what a rebalance replays) and the outbox relay
// (emitted messages) carry exactly-once.

// openPG returns a store on a fresh schema, dropped when the test ends,
// and a way to query it.
func openPG(t testing.TB) (*pgstore.Store, enginetest.QueryRow) {
	t.Helper()
	url := testenv.PostgresURL(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	schema := "t_kafka_" + hex.EncodeToString(b)
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

// settled reports whether nothing is in flight: nothing uncommitted in
// the group, no unsent outbox row, no timer.
func settled(tr *kafka.Transport, q enginetest.QueryRow) func() (bool, error) {
	return func() (bool, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ready, unacked, err := tr.Pending(ctx)
		if err != nil {
			return false, nil // a rebalance may be under way; poll again
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

// workerConfig is the transport of the engine tests: group sessions of a
// few seconds, so that a killed member's partitions move quickly.
func workerConfig(topic string) *kafka.Config {
	return &kafka.Config{
		Topic: topic, Partitions: 4, Lease: workerLease, RebalanceTimeout: 10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Opts:   []kgo.Opt{kgo.SessionTimeout(3 * time.Second), kgo.HeartbeatInterval(300 * time.Millisecond), kgo.FetchMaxWait(200 * time.Millisecond)},
	}
}

// Three engines on one PostgreSQL, each its own member of the group (the
// group rebalances as they join), every message published three times:
// every increment and timer applies once.
func TestEngineExactlyOnceOnKfake(t *testing.T) { engineExactlyOnce(t, kfakeURL(t)) }

func TestEngineExactlyOnceOnKafka(t *testing.T) { engineExactlyOnce(t, realURL(t)) }

func engineExactlyOnce(t *testing.T, url string) {
	st, q := openPG(t)
	topic := topicFor(t)
	var engines []*idem.Engine
	var first *kafka.Transport
	for i := range 3 {
		tr := open(t, url, workerConfig(topic))
		t.Cleanup(func() { _ = tr.Close() })
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
	enginetest.WaitFor(t, 90*time.Second, "topic, outbox and timers drained", settled(first, q))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
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

// Records another program wrote into the topic are dead-lettered by the
// engine, once each, and committed past: they do not come back.
func TestEngineDeadLettersForeignRecordsOnKfake(t *testing.T) {
	url := kfakeURL(t)
	cfg := workerConfig(topicFor(t))
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	tr := open(t, url, cfg)
	t.Cleanup(func() { _ = tr.Close() })
	st := memstore.New(nil)
	e := enginetest.NewEngine(t, st, tr, &idem.Config{Lanes: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	seeds, _, err := kafka.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ctx := context.Background()
	for p := range int32(2) {
		if err := raw.ProduceSync(ctx, &kgo.Record{Topic: cfg.Topic, Partition: p, Value: []byte(`"junk"`)}).FirstErr(); err != nil {
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
	enginetest.WaitFor(t, 30*time.Second, "two dead letters and nothing uncommitted in the topic", func() (bool, error) {
		var err error
		if dead, err = st.ListDeadLetters(ctx, nil); err != nil {
			return false, err
		}
		ready, unacked, err := tr.Pending(ctx)
		return len(dead) == 2 && ready == 0 && unacked == 0 && e.Stats().DeadLettered >= 2, err
	})
	for _, d := range dead {
		if !strings.HasPrefix(d.Envelope.ID, "kafka:"+cfg.Topic+"/") || d.Reason != idem.ReasonUnknownType || !strings.Contains(string(d.Envelope.Body), "junk") {
			t.Errorf("dead letter %s: reason %s, body %s; want an unknown_type letter keeping the record", d.Envelope.ID, d.Reason, d.Envelope.Body)
		}
	}
	if s := e.Stats(); s.DeadLettered != 2 {
		t.Errorf("stats %+v: want 2 dead-lettered, each once", s)
	}
}

// TestMain doubles as the worker process of the multi-process test.
func TestMain(m *testing.M) {
	if topic := os.Getenv("IDEM_KAFKA_WORKER_TOPIC"); topic != "" {
		os.Exit(enginetest.RunWorkerOn(func(ctx context.Context) (store.Store, transport.Transport, error) {
			st, err := pgstore.Open(ctx, os.Getenv("IDEM_TEST_PG_URL"), &pgstore.Config{Schema: os.Getenv("IDEM_KAFKA_WORKER_SCHEMA"), MaxConns: 8})
			if err != nil {
				return nil, nil, err
			}
			tr, err := kafka.Open(ctx, os.Getenv("IDEM_KAFKA_WORKER_URL"), workerConfig(topic))
			if err != nil {
				_ = st.Close()
				return nil, nil, err
			}
			return st, tr, nil
		}))
	}
	os.Exit(m.Run())
}

// Three worker processes on PostgreSQL and Kafka (kfake, in this test's
// process), every message published three times, one worker killed with
// SIGKILL mid-run and restarted: its partitions move when its session
// expires, the others replay what it had not committed, and every saga
// ends in its expected state with nothing left uncommitted, in the outbox
// or in the timers. kfake keeps no data across a restart of its own, so a
// broker crash is not part of this case.
func TestWorkerProcessesSurviveSIGKILLOnKfake(t *testing.T) { workersSurviveSIGKILL(t, kfakeURL(t)) }

func TestWorkerProcessesSurviveSIGKILLOnKafka(t *testing.T) { workersSurviveSIGKILL(t, realURL(t)) }

func workersSurviveSIGKILL(t *testing.T, url string) {
	st, q := openPG(t)
	topic := topicFor(t)
	tr := open(t, url, workerConfig(topic))
	t.Cleanup(func() { _ = tr.Close() })
	producer := enginetest.NewEngine(t, st, tr, nil)
	enginetest.SurviveSIGKILLOn(t, enginetest.KillRun{
		Store:    st,
		Producer: producer,
		Query:    q,
		Env:      []string{"IDEM_KAFKA_WORKER_TOPIC=" + topic, "IDEM_KAFKA_WORKER_URL=" + url, "IDEM_KAFKA_WORKER_SCHEMA=" + st.Schema()},
		Settled:  settled(tr, q),
	})
}

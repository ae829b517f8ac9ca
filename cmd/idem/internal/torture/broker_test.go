package torture

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
	"github.com/idemhq/idem/transport/rabbitmq"
	"github.com/idemhq/idem/transport/redisstreams"
)

// openTestBroker is the test binary's TransportOpener (the CLI's is not
// linked here): the broker transports themselves, in the run's namespace
// and with its lease. run passes it to the driver, and TestMain to the
// worker processes.
func openTestBroker(ctx context.Context, spec string, o BrokerOptions) (transport.Transport, func(), error) {
	if strings.HasPrefix(spec, "redis") {
		tr, err := redisstreams.Open(ctx, spec, &redisstreams.Config{Namespace: o.Namespace, Lease: o.Lease, Logger: o.Logger})
		if err != nil {
			return nil, nil, err
		}
		return tr, func() {}, nil
	}
	if strings.HasPrefix(spec, "amqp") {
		cfg := &rabbitmq.Config{Namespace: o.Namespace, Lease: o.Lease, Logger: o.Logger}
		tr, err := rabbitmq.Open(ctx, spec, cfg)
		if err != nil {
			return nil, nil, err
		}
		return &testAMQP{Transport: tr, url: spec, cfg: cfg}, func() {}, nil
	}
	tr, err := natsjs.Open(ctx, spec, &natsjs.Config{Stream: o.Namespace, AckWait: o.Lease, Logger: o.Logger, Replicas: o.Replicas})
	if err != nil {
		return nil, nil, err
	}
	return tr, func() {}, nil
}

type testAMQP struct {
	*rabbitmq.Transport
	url string
	cfg *rabbitmq.Config
}

func (t *testAMQP) DeleteNamespace(ctx context.Context) error {
	return rabbitmq.DeleteNamespace(ctx, t.url, t.cfg)
}

// server returns the URL in env, skipping the test without it outside
// scripts/test (failing under IDEM_REQUIRE_SERVERS=1).
func server(t *testing.T, env, what string) string {
	t.Helper()
	return testenv.Server(t, env, what+" tests", "(scripts/test sets it)")
}

func mustPass(t *testing.T, r *Report, faults ...string) {
	t.Helper()
	if !r.Pass() {
		t.Fatalf("run failed: %v %v", r.Problems, r.Violations)
	}
	for _, f := range faults {
		if r.Faults[f] == 0 {
			t.Errorf("fault %q never injected: %v", f, r.Faults)
		}
	}
	if r.Journal == 0 || r.Sent == 0 {
		t.Errorf("no work: sent %d, journal %d", r.Sent, r.Journal)
	}
}

// Workers on one embedded nats-server the driver runs (and restarts):
// exactly-once holds with JetStream between the processes. PostgreSQL when
// IDEM_TEST_PG_URL is set, SQLite otherwise.
func TestTortureEmbeddedNATS(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process run of several seconds")
	}
	st := os.Getenv("IDEM_TEST_PG_URL")
	if st == "" {
		st = "sqlite"
	}
	r := run(t, Options{Store: st, Transport: TransportEmbedded, Duration: 10 * time.Second, Seed: 13, MinKills: 3})
	mustPass(t, r, "SIGKILL by the driver", "duplicate copies published", "broker restarts")
}

// Workers on RabbitMQ with a PostgreSQL store. The broker is restarted
// only by scripts/test's idem torture run (a RabbitMQ restart takes ten
// seconds or more); here the faults are the workers'.
func TestTortureRabbitMQ(t *testing.T) {
	amqpURL := server(t, "IDEM_TEST_AMQP_URL", "RabbitMQ")
	pg := server(t, "IDEM_TEST_PG_URL", "PostgreSQL")
	if testing.Short() {
		t.Skip("multi-process run of several seconds")
	}
	r := run(t, Options{Store: pg, Transport: amqpURL, Duration: 10 * time.Second, Seed: 17, MinKills: 3})
	mustPass(t, r, "SIGKILL by the driver", "duplicate copies published")
	if strings.Contains(r.Transport, "guest:guest") {
		t.Errorf("the report shows the broker's password: %s", r.Transport)
	}
}

// Workers on Redis Streams with a PostgreSQL store. The server is
// restarted by scripts/test's idem torture run (its restart would disturb
// the other packages' tests that share it); here the faults are the
// workers'.
func TestTortureRedis(t *testing.T) {
	redisURL := server(t, "IDEM_TEST_REDIS_URL", "Redis")
	pg := server(t, "IDEM_TEST_PG_URL", "PostgreSQL")
	if testing.Short() {
		t.Skip("multi-process run of several seconds")
	}
	r := run(t, Options{Store: pg, Transport: redisURL, Duration: 10 * time.Second, Seed: 19, MinKills: 3})
	mustPass(t, r, "SIGKILL by the driver", "duplicate copies published")
}

// The settle rule counts the broker's backlog: with workers that never
// consume, every message stays in the broker while the database shows
// nothing in flight, and the run must report itself unsettled instead of
// settling at once and calling the messages lost.
func TestSettleCountsTheBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("a run of several seconds")
	}
	r, err := Run(context.Background(), Options{
		Store: "sqlite", Transport: TransportEmbedded, OpenTransport: openTestBroker, Duration: time.Second, Settle: 3 * time.Second, Seed: 5,
		Faults:  []string{FaultDuplicates},
		Command: func() *exec.Cmd { return exec.Command("sleep", "600") }, // a worker that consumes nothing
		Dir:     t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent == 0 {
		t.Fatal("nothing sent")
	}
	if len(r.Problems) == 0 || !strings.Contains(r.Problems[0], "not settled") {
		t.Fatalf("problems %q: want the run reported unsettled", r.Problems)
	}
}

// A run with a broker and no TransportOpener is refused before it starts
// anything, saying what is missing.
func TestTransportWithoutOpenerRefused(t *testing.T) {
	_, err := Run(t.Context(), Options{Store: "sqlite", Transport: "nats://u:secret@127.0.0.1:4222", Duration: time.Second, Command: workerCommand, Dir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "OpenTransport") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("Run with a transport and no opener: %v; want a refusal naming Options.OpenTransport, without the password", err)
	}
}

// The report and the log name the store without the passwords, the
// direct URL's (escaped in the query) included.
func TestRedactURLHidesTheDirectURL(t *testing.T) {
	raw := "postgres://u:outer@127.0.0.1:6432/db?sslmode=disable&idem_direct_url=" + url.QueryEscape("postgres://u:inner@127.0.0.1:5432/db")
	got := redactURL(raw)
	if strings.Contains(got, "outer") || strings.Contains(got, "inner") || !strings.Contains(got, "127.0.0.1:6432") {
		t.Errorf("redactURL = %q: want both passwords hidden, the pooler's address kept", got)
	}
}

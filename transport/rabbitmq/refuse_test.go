package rabbitmq_test

import (
	"context"
	"errors"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/rabbitmq"
)

// withUser returns the test URL with other credentials or virtual host.
func withURL(t *testing.T, user, pass, vhost string) string {
	t.Helper()
	u, err := url.Parse(testenv.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if user != "" {
		u.User = url.UserPassword(user, pass)
	}
	if vhost != "" {
		u.Path = "/" + vhost
	}
	return u.String()
}

func openErr(t *testing.T, url string, cfg rabbitmq.Config) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tr, err := rabbitmq.Open(ctx, url, &cfg)
	if err == nil {
		_ = tr.Close()
		t.Fatal("Open succeeded, want a refusal")
	}
	if strings.Contains(err.Error(), "secret-pw") {
		t.Errorf("the error shows the password: %v", err)
	}
	return err
}

func wantAdvice(t *testing.T, err error, advice ...string) {
	t.Helper()
	for _, a := range advice {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("error %q does not say %q", err, a)
		}
	}
}

func TestOpenRefuses(t *testing.T) {
	testenv.AMQPURL(t)
	t.Run("Unreachable", func(t *testing.T) {
		err := openErr(t, "amqp://guest:secret-pw@127.0.0.1:1/", rabbitmq.Config{})
		wantAdvice(t, err, "cannot reach the broker at amqp://guest:xxxxx@127.0.0.1:1/", "running and listening")
	})
	t.Run("NotAnAMQPURL", func(t *testing.T) {
		err := openErr(t, "http://guest:secret-pw@127.0.0.1/", rabbitmq.Config{})
		wantAdvice(t, err, "not a valid AMQP URI")
	})
	t.Run("BadPassword", func(t *testing.T) {
		err := openErr(t, withURL(t, "guest", "secret-pw", ""), rabbitmq.Config{Namespace: namespace(t, 1)})
		wantAdvice(t, err, "refused the user name or password")
	})
	t.Run("UnknownVirtualHost", func(t *testing.T) {
		err := openErr(t, withURL(t, "", "", "no-such-vhost"), rabbitmq.Config{Namespace: namespace(t, 1)})
		wantAdvice(t, err, "virtual host")
	})
	t.Run("MissingPermissions", func(t *testing.T) {
		// A user that may read and write but not declare anything.
		ctl(t, "add_user", "idem-readonly", "ro-pass")
		t.Cleanup(func() { _ = exec.Command(hook(t, "IDEM_TEST_AMQP_CTL"), "delete_user", "idem-readonly").Run() })
		ctl(t, "set_permissions", "-p", "/", "idem-readonly", "^$", ".*", ".*")
		ns := namespace(t, 1)
		err := openErr(t, withURL(t, "idem-readonly", "ro-pass", ""), rabbitmq.Config{Namespace: ns, Partitions: 1})
		wantAdvice(t, err, "lacks permissions", "set_permissions")
	})
	t.Run("ClassicQueueInTheWay", func(t *testing.T) {
		ns := namespace(t, 2)
		conn, err := amqp.Dial(testenv.AMQPURL(t))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ch.QueueDeclare(ns+".p1", true, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		err = openErr(t, testenv.AMQPURL(t), rabbitmq.Config{Namespace: ns, Partitions: 2})
		wantAdvice(t, err, ns+".p1 already exists with other settings", "inequivalent arg", "quorum", "Config.Namespace")
	})
	t.Run("FewerPartitionsThanQueues", func(t *testing.T) {
		ns := namespace(t, 4)
		open(t, rabbitmq.Config{Namespace: ns, Partitions: 4}).Close()
		err := openErr(t, testenv.AMQPURL(t), rabbitmq.Config{Namespace: ns, Partitions: 2})
		wantAdvice(t, err, "more than 2 partitions", "same Config.Partitions")
	})
	t.Run("MorePartitionsThanQueues", func(t *testing.T) {
		// A tool (idem dlq replay, say) with the default 16 partitions on a
		// namespace of 4 would publish into queues nobody consumes.
		ns := namespace(t, 16)
		open(t, rabbitmq.Config{Namespace: ns, Partitions: 4}).Close()
		err := openErr(t, testenv.AMQPURL(t), rabbitmq.Config{Namespace: ns, Partitions: 16})
		wantAdvice(t, err, "fewer than 16 partitions", "same Config.Partitions")
	})
	t.Run("BadConfig", func(t *testing.T) {
		err := openErr(t, testenv.AMQPURL(t), rabbitmq.Config{Partitions: -1})
		wantAdvice(t, err, "Config.Partitions")
	})
}

// A broker restart: a delivery held across it is fenced and comes back,
// and Publish and Receive work again once the transport has reconnected.
func TestReconnectsAfterBrokerRestart(t *testing.T) {
	restart := hook(t, "IDEM_TEST_AMQP_RESTART")
	ns := namespace(t, 2)
	tr := open(t, rabbitmq.Config{Namespace: ns, Partitions: 2, Lease: time.Minute, ReconnectMax: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env := transport.Envelope{ID: "before-restart", Type: "test.Ping", CorrelationID: "k1", SentAt: time.Now(), Body: []byte(`{}`)}
	if err := tr.Publish(ctx, []transport.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	held, err := tr.Receive(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	if out, err := exec.Command(restart).CombinedOutput(); err != nil {
		t.Fatalf("restarting RabbitMQ: %v\n%s", err, out)
	}
	t.Logf("RabbitMQ restarted in %v", time.Since(start).Round(time.Millisecond))
	// The restart's own time does not count against the rest of the test
	// (a loaded CI machine took 3 minutes to restart the broker).
	ctx, cancel = context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	// Publish waits for the reconnection.
	after := transport.Envelope{ID: "after-restart", Type: "test.Ping", CorrelationID: "k2", SentAt: time.Now(), Body: []byte(`{}`)}
	if err := tr.Publish(ctx, []transport.Envelope{after}); err != nil {
		t.Fatalf("Publish after the restart: %v", err)
	}
	if err := tr.Ack(ctx, held); !errors.Is(err, transport.ErrLeaseLost) {
		t.Errorf("Ack of a delivery from before the restart: got %v, want ErrLeaseLost", err)
	}
	got := map[string]int{}
	for len(got) < 2 {
		ds, err := tr.Receive(ctx, 2)
		if err != nil {
			t.Fatalf("Receive after the restart (got %v so far): %v", got, err)
		}
		for _, d := range ds {
			got[d.Envelope.ID] = d.Attempt
		}
		if err := tr.Ack(ctx, ds); err != nil {
			t.Fatalf("Ack after the restart: %v", err)
		}
	}
	if got["before-restart"] != 2 || got["after-restart"] != 1 {
		t.Errorf("attempts after the restart: %v, want before-restart 2 and after-restart 1", got)
	}
}

// Several URLs (one cluster's nodes): a node that does not answer is
// skipped, and only when none answers is Open refused, naming each.
func TestOpenTriesEveryURL(t *testing.T) {
	ns := namespace(t, 1)
	tr := open(t, rabbitmq.Config{Namespace: ns, Partitions: 1}, "amqp://guest:guest@127.0.0.1:1/, "+testenv.AMQPURL(t))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	env := transport.Envelope{ID: "m1", Type: "test.Ping", SentAt: time.Now()}
	if err := tr.Publish(ctx, []transport.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	ds, err := tr.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || ds[0].Envelope.ID != "m1" {
		t.Fatalf("Receive: %v, %v", ds, err)
	}
	if err := tr.Ack(ctx, ds); err != nil {
		t.Fatal(err)
	}

	err = openErr(t, "amqp://guest:secret-pw@127.0.0.1:1/,amqp://guest:secret-pw@127.0.0.1:2/", rabbitmq.Config{})
	wantAdvice(t, err, "127.0.0.1:1/", "127.0.0.1:2/", "cannot reach")
}

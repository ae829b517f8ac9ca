package rabbitmq_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/rabbitmq"
	"github.com/idemhq/idem/transport/transporttest"
)

// hook returns the path of a script scripts/rabbitmq.sh exported in env,
// skipping (or failing under IDEM_REQUIRE_SERVERS) without it.
func hook(t testing.TB, env string) string {
	t.Helper()
	return testenv.Server(t, env, "this test", "a script from scripts/rabbitmq.sh")
}

// ctl runs rabbitmqctl against the test broker.
func ctl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := exec.Command(hook(t, "IDEM_TEST_AMQP_CTL"), args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// namespace returns a fresh namespace whose exchanges and queues are
// deleted when the test ends.
func namespace(t testing.TB, partitions int) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "t" + hex.EncodeToString(b)
	url := testenv.AMQPURL(t)
	t.Cleanup(func() { deleteNamespace(t, url, ns, partitions) })
	return ns
}

func deleteNamespace(t testing.TB, url, ns string, partitions int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := rabbitmq.DeleteNamespace(ctx, url, &rabbitmq.Config{Namespace: ns, Partitions: partitions}); err != nil {
		t.Errorf("cleanup of namespace %s: %v", ns, err)
	}
}

// open opens a transport on the test broker (or on url, when given).
func open(t testing.TB, cfg rabbitmq.Config, url ...string) *rabbitmq.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := testenv.AMQPURL(t)
	if len(url) > 0 {
		u = url[0]
	}
	tr, err := rabbitmq.Open(ctx, u, &cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func TestConformance(t *testing.T) {
	testenv.AMQPURL(t)
	const lease = time.Second
	transporttest.Run(t, transporttest.Features{Lease: lease, Fencing: true, NativeDelay: true, Partitioned: true, SizeLimit: true, Pending: true}, func(t *testing.T) transport.Transport {
		// A small MaxMessageSize keeps the size limit case's message small.
		return open(t, rabbitmq.Config{Namespace: namespace(t, 2), Partitions: 2, Lease: lease, MaxMessageSize: 1 << 20})
	})
}

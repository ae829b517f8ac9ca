package redisstreams_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/redisstreams"
	"github.com/idemhq/idem/transport/transporttest"
)

// namespace returns a fresh namespace whose keys are deleted when the test
// ends.
func namespace(t testing.TB) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	ns := "t" + hex.EncodeToString(b)
	url := testenv.RedisURL(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := redisstreams.DeleteNamespace(ctx, url, &redisstreams.Config{Namespace: ns}); err != nil {
			t.Errorf("cleanup of namespace %s: %v", ns, err)
		}
	})
	return ns
}

// open opens a transport on the test server (or on url, when given).
func open(t testing.TB, cfg redisstreams.Config, url ...string) *redisstreams.Transport {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	u := testenv.RedisURL(t)
	if len(url) > 0 {
		u = url[0]
	}
	tr, err := redisstreams.Open(ctx, u, &cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	return tr
}

func TestConformance(t *testing.T) {
	testenv.RedisURL(t)
	const lease = time.Second
	transporttest.Run(t, transporttest.Features{Lease: lease, Fencing: true, NativeDelay: true, Partitioned: true, SizeLimit: true, Pending: true}, func(t *testing.T) transport.Transport {
		return open(t, redisstreams.Config{Namespace: namespace(t), Partitions: 4, Lease: lease})
	})
}

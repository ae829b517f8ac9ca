package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/torture"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/redisstreams"
)

// redis:// URLs open the Redis Streams transport; its refusals reach the
// user without the password.
func TestOpenTransportRedis(t *testing.T) {
	ctx := t.Context()
	if _, _, err := openTransport(ctx, "redis://:secret@127.0.0.1:1/0", t.TempDir()); err == nil || !strings.Contains(err.Error(), "cannot reach the Redis server") || strings.Contains(err.Error(), "secret") {
		t.Errorf("openTransport(unreachable redis://…): got %v, want the unreachable-server error without the password", err)
	}
	if _, _, err := openTransport(ctx, "sqs://localhost:9092", t.TempDir()); err == nil || !strings.Contains(err.Error(), "redis://") {
		t.Errorf("openTransport(sqs://…): got %v, want an error listing redis://", err)
	}
	if got := transportName("rediss://h:6380/0"); got != "redis" {
		t.Errorf("transportName(rediss://…) = %q, want redis", got)
	}
}

// idem torture's seam opens Redis in the run's namespace; the transport
// counts its backlog and deletes the namespace.
func TestTortureTransportRedis(t *testing.T) {
	url := testenv.RedisURL(t)
	ctx := t.Context()
	ns := "torture_cli_redis_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "_")
	tr, release, err := tortureTransport(ctx, url, torture.BrokerOptions{Namespace: ns, Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if err := tr.Publish(ctx, []transport.Envelope{{ID: "t-1", Type: "Ping", SentAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	b, ok := tr.(transport.PendingCounter)
	if !ok {
		t.Fatalf("%T cannot count its backlog", tr)
	}
	if waiting, unacked, err := b.Pending(ctx); err != nil || waiting+unacked != 1 {
		t.Fatalf("Pending = %d, %d, %v; want the one message", waiting, unacked, err)
	}
	d, ok := tr.(torture.NamespaceDeleter)
	if !ok {
		t.Fatalf("%T cannot delete its namespace", tr)
	}
	if err := d.DeleteNamespace(ctx); err != nil {
		t.Fatal(err)
	}
	if waiting, unacked, err := b.Pending(ctx); err != nil || waiting+unacked != 0 {
		t.Fatalf("after DeleteNamespace: Pending = %d, %d, %v; want nothing", waiting, unacked, err)
	}
}

// idem bench's Redis namespaces hand out only the benchmark's types and
// are deleted on Close.
func TestBenchTransportRedis(t *testing.T) {
	url := testenv.RedisURL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	open, stop, err := benchTransport(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	ns := "bench_cli_redis_" + strings.ReplaceAll(time.Now().Format("150405.000000"), ".", "_")
	tr, err := open(ctx, ns, []string{"Wanted"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Publish(ctx, []transport.Envelope{{ID: "other", Type: "Other", CorrelationID: "k"}, {ID: "wanted", Type: "Wanted", CorrelationID: "k"}}); err != nil {
		t.Fatal(err)
	}
	ds, err := tr.Receive(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].Envelope.ID != "wanted" {
		t.Fatalf("Receive: %v, %v; want only wanted", ds, err)
	}
	if err := tr.Ack(ctx, ds); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	// The namespace is gone: a transport with another partition count
	// opens on it without a refusal, and removes it again.
	again, err := redisstreams.Open(ctx, url, &redisstreams.Config{Namespace: ns, Partitions: 3})
	if err != nil {
		t.Fatalf("Open with another partition count after Close: %v (the namespace was not deleted)", err)
	}
	defer again.Close()
	if err := again.DeleteNamespace(ctx); err != nil {
		t.Fatal(err)
	}
}

package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/torture"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs/natsembed"
)

func TestOpenTransport(t *testing.T) {
	ctx := t.Context()
	tr, closeFn, err := openTransport(ctx, "", t.TempDir())
	if err != nil || tr != nil {
		t.Fatalf(`openTransport(""): got %v, %v; want no transport (the store's queue)`, tr, err)
	}
	closeFn()

	if _, _, err := openTransport(ctx, "sqs://localhost:9092", t.TempDir()); err == nil || !strings.Contains(err.Error(), "nats-embedded") || !strings.Contains(err.Error(), "amqp://") {
		t.Errorf("openTransport(sqs://…): got %v, want an error listing the supported transports", err)
	}
	if _, _, err := openTransport(ctx, "amqp://guest:secret@127.0.0.1:1/", t.TempDir()); err == nil || !strings.Contains(err.Error(), "cannot reach") || strings.Contains(err.Error(), "secret") {
		t.Errorf("openTransport(unreachable amqp://…): got %v, want RabbitMQ's unreachable-broker error without the password", err)
	}

	tr, closeFn, err = openTransport(ctx, "nats-embedded", t.TempDir())
	if err != nil {
		t.Fatalf("openTransport(nats-embedded): %v", err)
	}
	defer closeFn()
	if err := tr.Publish(ctx, []transport.Envelope{{ID: "cli-1", Type: "Ping", SentAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	ds, err := tr.Receive(ctx, 1)
	if err != nil || len(ds) != 1 || ds[0].Envelope.ID != "cli-1" {
		t.Fatalf("Receive: got %v, %v; want cli-1", ds, err)
	}
	if err := tr.Ack(ctx, ds); err != nil {
		t.Fatal(err)
	}
}

// idem torture's seam opens a broker in the run's namespace, and the
// transport counts its backlog and deletes the namespace.
func TestTortureTransport(t *testing.T) {
	ctx := t.Context()
	if _, _, err := tortureTransport(ctx, transportEmbedded, torture.BrokerOptions{}); err == nil {
		t.Error("tortureTransport(nats-embedded) accepted: the driver runs that server itself")
	}
	srv, err := natsembed.Start(ctx, t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	tr, release, err := tortureTransport(ctx, srv.URL(), torture.BrokerOptions{Namespace: "torture_cli_1", Lease: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	defer tr.Close()
	if err := tr.Publish(ctx, []transport.Envelope{{ID: "t-1", Type: "Ping", SentAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	b, ok := tr.(transport.PendingCounter)
	if !ok {
		t.Fatalf("%T cannot count its backlog", tr)
	}
	if ready, unacked, err := b.Pending(ctx); err != nil || ready+unacked != 1 {
		t.Fatalf("Pending = %d, %d, %v; want the one message", ready, unacked, err)
	}
	d, ok := tr.(torture.NamespaceDeleter)
	if !ok {
		t.Fatalf("%T cannot delete its namespace", tr)
	}
	if err := d.DeleteNamespace(ctx); err != nil {
		t.Fatal(err)
	}
}

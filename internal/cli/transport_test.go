package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/transport"
)

func TestOpenTransport(t *testing.T) {
	ctx := t.Context()
	tr, closeFn, err := openTransport(ctx, "", t.TempDir())
	if err != nil || tr != nil {
		t.Fatalf(`openTransport(""): got %v, %v; want no transport (the store's queue)`, tr, err)
	}
	closeFn()

	if _, _, err := openTransport(ctx, "kafka://localhost:9092", t.TempDir()); err == nil || !strings.Contains(err.Error(), "nats-embedded") || !strings.Contains(err.Error(), "amqp://") {
		t.Errorf("openTransport(kafka://…): got %v, want an error listing the supported transports", err)
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

package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/idemhq/idem/cmd/idem/internal/torture"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/kafka"
)

// kfakeURL starts franz-go's in-process kfake cluster, standing in for a
// Kafka broker, for the test.
func kfakeURL(t *testing.T) string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return "kafka://" + c.ListenAddrs()[0]
}

// kafka:// URLs open the Kafka transport; a URL with credentials is
// refused without showing them.
func TestOpenTransportKafka(t *testing.T) {
	ctx := t.Context()
	if _, _, err := openTransport(ctx, "kafka://u:secret@127.0.0.1:1", t.TempDir()); err == nil || !strings.Contains(err.Error(), "Config.Opts") || strings.Contains(err.Error(), "secret") {
		t.Errorf("openTransport(kafka://u:secret@…): got %v, want the refusal of credentials in the URL, without the password", err)
	}
	tr, release, err := openTransport(ctx, kfakeURL(t), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if d, ok := tr.(transport.Describer); !ok || d.Describe().System != "kafka" {
		t.Errorf("openTransport(kafka://…) = %T, want the Kafka transport", tr)
	}
}

// idem torture's seam opens Kafka on the run's topic; the transport
// counts its backlog and deletes the topic and group.
func TestTortureTransportKafka(t *testing.T) {
	url := kfakeURL(t)
	ctx := t.Context()
	tr, release, err := tortureTransport(ctx, url, torture.BrokerOptions{Namespace: "torture_cli_kafka", Lease: 2 * time.Second})
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
	// The topic is gone: one with another partition count opens on its
	// name without a refusal.
	again, err := kafka.Open(ctx, url, &kafka.Config{Topic: "torture_cli_kafka", Partitions: 3})
	if err != nil {
		t.Fatalf("Open with another partition count after DeleteNamespace: %v (the topic was not deleted)", err)
	}
	_ = again.Close()
}

// idem bench's Kafka topics hand out only the benchmark's types and are
// deleted on Close.
func TestBenchTransportKafka(t *testing.T) {
	url := kfakeURL(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	open, stop, err := benchTransport(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	tr, err := open(ctx, "bench_cli_kafka", []string{"Wanted"})
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
	again, err := kafka.Open(ctx, url, &kafka.Config{Topic: "bench_cli_kafka", Partitions: 3})
	if err != nil {
		t.Fatalf("Open with another partition count after Close: %v (the topic was not deleted)", err)
	}
	_ = again.Close()
}

// idem dlq replay --transport kafka://… publishes the dead letter onto the
// topic the engines consume (the default namespace's), not onto the
// store's queue.
func TestDLQReplayOntoKafka(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	st := b.open()
	seed(t, st, deadLetter("n1", "permanent_error", time.Hour))
	url := kfakeURL(t)
	code, out, errOut := b.run("dlq", "replay", "n1", "--transport", url)
	wantExit(t, code, out, errOut, 0)

	tr, err := kafka.Open(t.Context(), url, nil) // the engines' side: the default topic and group
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ds, err := tr.Receive(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].Envelope.ID != "n1" || string(ds[0].Envelope.Body) != `{"search":"n1","n":1}` {
		t.Fatalf("received %+v (%v) from the topic, want n1 with its body", ds, err)
	}
	sctx, scancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer scancel()
	if extra, err := st.Receive(sctx, 10); len(extra) != 0 {
		t.Errorf("the store's queue got %+v (%v), want nothing: the replay goes to the broker", extra, err)
	}
}

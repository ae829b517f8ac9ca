package kafka_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/kafka"
)

// A poison record (here one another producer wrote, which does not decode
// to an envelope) is handed out without a type for the engine to
// dead-letter, never skipped: while it is unsettled, no commit passes it,
// even though the record behind it in its partition was acked, so a
// member that takes the partition over hands both out again. Once it is
// acked (the engine acks what it dead-letters) the partition moves on and
// nothing comes back.
func TestPoisonRecordIsNeverSkippedOnKfake(t *testing.T) { poisonRecord(t, kfakeURL(t)) }

func TestPoisonRecordIsNeverSkippedOnKafka(t *testing.T) { poisonRecord(t, realURL(t)) }

func poisonRecord(t *testing.T, url string) {
	cfg := testConfig(topicFor(t), 30*time.Second)
	a := open(t, url, cfg)
	seeds, _, err := kafka.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	if err := raw.ProduceSync(t.Context(), &kgo.Record{Topic: cfg.Topic, Partition: 0, Key: []byte("k"), Value: []byte("not an envelope \x00\xff")}).FirstErr(); err != nil {
		t.Fatalf("producing the poison record: %v", err)
	}
	// A good message behind it in partition 0.
	var good transport.Envelope
	for _, e := range envs("good", 64) {
		if transport.PartitionOf(transport.PartitionKey(&e), cfg.Partitions) == 0 {
			good = e
			break
		}
	}
	if good.ID == "" {
		t.Fatal("no envelope of the case lands in partition 0; change the case")
	}
	if err := a.Publish(t.Context(), []transport.Envelope{good}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	poisonID := "kafka:" + cfg.Topic + "/0/0"
	want := map[string]bool{poisonID: true, good.ID: true}
	ds := receiveIDs(t, a, want, 10*time.Second)
	var poison transport.Delivery
	for _, d := range ds {
		if d.Envelope.ID == poisonID {
			poison = d
		} else if err := a.Ack(t.Context(), []transport.Delivery{d}); err != nil {
			t.Fatalf("Ack of %s: %v", d.Envelope.ID, err)
		}
	}
	if poison.Envelope.Type != "" || !strings.Contains(string(poison.Envelope.Body), "not an envelope") {
		t.Fatalf("poison record handed out as type %q, body %q: want no type and the record in the body", poison.Envelope.Type, poison.Envelope.Body)
	}
	// Retried a few times, as the engine does before its limit.
	for attempt := 2; attempt <= 3; attempt++ {
		if err := a.Nack(t.Context(), poison, 0); err != nil {
			t.Fatalf("Nack: %v", err)
		}
		poison = receiveIDs(t, a, map[string]bool{poisonID: true}, 10*time.Second)[0]
		if poison.Attempt != attempt {
			t.Fatalf("poison record handed out again as attempt %d, want %d", poison.Attempt, attempt)
		}
	}
	if err := a.Close(); err != nil { // the poison record is still unsettled
		t.Fatalf("Close: %v", err)
	}

	b := open(t, url, cfg)
	ds = receiveIDs(t, b, want, 20*time.Second)    // both again: no commit passed the poison record
	if err := b.Ack(t.Context(), ds); err != nil { // dead-lettered by the engine, then acked
		t.Fatalf("Ack: %v", err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	c := open(t, url, cfg)
	defer c.Close()
	expectQuiet(t, c, time.Second)
}

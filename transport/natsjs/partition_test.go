package natsjs_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
)

// Two engine consumers receiving their partitions at once never see one
// key, each sees its keys' messages in publication order, and together
// they see every message.
func TestReceivePartitionKeepsKeysApart(t *testing.T) {
	const parts, keys, perKey = 2, 24, 20
	tr := open(t, natsjs.Config{Partitions: 8})
	var envs []transport.Envelope
	for i := range perKey {
		for k := range keys {
			envs = append(envs, transport.Envelope{ID: fmt.Sprintf("k%d-%d", k, i), Type: "T", CorrelationID: "key-" + strconv.Itoa(k),
				Headers: map[string]string{"seq": strconv.Itoa(i)}, SentAt: time.Now()})
		}
	}
	for i := 0; i < len(envs); i += 50 {
		if err := tr.Publish(t.Context(), envs[i:min(i+50, len(envs))]); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	want := make([]int, parts) // messages per part
	for _, e := range envs {
		want[transport.PartitionOf(transport.PartitionKey(&e), parts)]++
	}
	var mu sync.Mutex
	owner := map[string]int{} // key -> the part that received it
	next := map[string]int{}  // key -> the next seq expected
	total := 0
	var wg sync.WaitGroup
	var errs []error
	fail := func(err error) { // mu is held
		errs = append(errs, err)
		cancel()
	}
	for part := range parts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for got := 0; got < want[part]; {
				ds, err := tr.ReceivePartition(ctx, 7, part, parts)
				mu.Lock()
				if err != nil {
					fail(fmt.Errorf("part %d: %w", part, err))
				}
				for _, d := range ds {
					key, seq := d.Envelope.CorrelationID, d.Envelope.Headers["seq"]
					if o, ok := owner[key]; ok && o != part {
						fail(fmt.Errorf("key %s received by parts %d and %d", key, o, part))
					}
					owner[key] = part
					if want := transport.PartitionOf(transport.PartitionKey(&d.Envelope), parts); want != part {
						fail(fmt.Errorf("key %s received by part %d, its hash names part %d", key, part, want))
					}
					if seq != strconv.Itoa(next[key]) {
						fail(fmt.Errorf("key %s: part %d received seq %s, want %d", key, part, seq, next[key]))
					}
					next[key]++
					total++
					got++
				}
				stop := len(errs) > 0
				mu.Unlock()
				if stop {
					return
				}
				if err := tr.Ack(ctx, ds); err != nil {
					mu.Lock()
					fail(err)
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d errors, the first: %v", len(errs), errs[0])
	}
	if len(owner) != keys || total != len(envs) {
		t.Fatalf("received %d messages of %d keys, want %d of %d", total, len(owner), len(envs), keys)
	}
}

// Open refuses fewer partitions than the partition consumers that exist:
// the subjects of the others would never be delivered.
func TestOpenRefusesFewerPartitions(t *testing.T) {
	stream := randName("FP_")
	open(t, natsjs.Config{Stream: stream, Partitions: 4})
	tr, err := natsjs.Open(t.Context(), sharedServer(t).URL(), &natsjs.Config{Stream: stream, Partitions: 2})
	if err == nil {
		tr.Close()
		t.Fatal("Open with fewer partitions than the consumers: got no error")
	}
	if !strings.Contains(err.Error(), "same Config.Partitions") {
		t.Errorf("error %q does not say to use the same Config.Partitions", err)
	}
}

// Open replaces the consumer of earlier versions, which took every
// subject, and the messages waiting on it are delivered.
func TestOpenReplacesSingleConsumer(t *testing.T) {
	stream := randName("SC_")
	url := sharedServer(t).URL()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	s, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: stream, Subjects: []string{stream + ".>"}, Retention: jetstream.WorkQueuePolicy})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateConsumer(t.Context(), jetstream.ConsumerConfig{Durable: "idem", AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second, FilterSubject: stream + ".>"}); err != nil {
		t.Fatal(err)
	}
	tr := open(t, natsjs.Config{Stream: stream})
	if err := tr.Publish(t.Context(), []transport.Envelope{{ID: "m1", Type: "T", CorrelationID: "k", SentAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ds, err := tr.Receive(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].Envelope.ID != "m1" {
		t.Fatalf("Receive: %v (%v), want m1", ds, err)
	}
	if _, err := s.Consumer(t.Context(), "idem"); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("the earlier version's consumer: %v, want it deleted", err)
	}
}

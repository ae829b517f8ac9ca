package kafka_test

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/kafka"
	"github.com/idemhq/idem/transport/transporttest"
)

// kfake, franz-go's in-process Kafka, stands in for a real cluster in
// these tests: it speaks the protocol (produce, fetch, consumer groups,
// offset commits, idempotent producers) but is one process, without
// replication, disks or network faults. Set IDEM_TEST_KAFKA_URL to run
// the same cases against a real broker.

var (
	fakeOnce sync.Once
	fakeURL  string
	fakeErr  error
	topicSeq atomic.Int64
)

// kfakeURL returns the kafka:// URL of an in-process kfake cluster shared
// by the package's tests (each test uses topics and groups of its own).
func kfakeURL(t *testing.T) string {
	t.Helper()
	fakeOnce.Do(func() {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
		if err != nil {
			fakeErr = err
			return
		}
		fakeURL = "kafka://" + c.ListenAddrs()[0]
	})
	if fakeErr != nil {
		t.Fatalf("kfake.NewCluster: %v", fakeErr)
	}
	return fakeURL
}

// realURL returns IDEM_TEST_KAFKA_URL, or skips.
func realURL(t *testing.T) string {
	t.Helper()
	u := os.Getenv("IDEM_TEST_KAFKA_URL")
	if u == "" {
		t.Skip("IDEM_TEST_KAFKA_URL is not set (kafka://host:9092): no Kafka broker can run here; the kfake tests cover the same cases in process")
	}
	return u
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)

// topicFor returns a topic name of the test's own.
func topicFor(t *testing.T) string {
	n := unsafeChars.ReplaceAllString(t.Name(), "_")
	if len(n) > 150 {
		n = n[len(n)-150:]
	}
	return fmt.Sprintf("idem-test-%d-%s", topicSeq.Add(1), n)
}

// testConfig is a transport on topic with a short lease and quick group
// heartbeats, so that joins and rebalances take milliseconds.
func testConfig(topic string, lease time.Duration) *kafka.Config {
	return &kafka.Config{
		Topic:      topic,
		Partitions: 4,
		Lease:      lease,
		Opts:       []kgo.Opt{kgo.HeartbeatInterval(100 * time.Millisecond), kgo.FetchMaxWait(200 * time.Millisecond)},
	}
}

// open opens a transport that is closed when the test ends. The first
// transport a test opens on a topic also deletes the topic and its group
// then, after the others have closed (cleanups run last-in first-out), so
// that a real broker keeps no test topics.
func open(t *testing.T, url string, cfg *kafka.Config) *kafka.Transport {
	t.Helper()
	tr, err := kafka.Open(t.Context(), url, cfg)
	if err != nil {
		t.Fatalf("kafka.Open(%s): %v", cfg.Topic, err)
	}
	key := t.Name() + "\x00" + cfg.Topic
	_, seen := cleaned.LoadOrStore(key, true)
	t.Cleanup(func() {
		_ = tr.Close()
		if seen {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := kafka.DeleteNamespace(ctx, url, cfg); err != nil {
			t.Logf("deleting topic %s: %v", cfg.Topic, err)
		}
	})
	return tr
}

// cleaned holds the test and topic pairs whose deletion is registered.
var cleaned sync.Map

func conformance(t *testing.T, url string, lease time.Duration) {
	transporttest.Run(t, transporttest.Features{
		Lease:       lease,
		Fencing:     true,
		NativeDelay: true,
		Partitioned: true,
		SizeLimit:   true,
		Pending:     true,
	}, func(t *testing.T) transport.Transport {
		return open(t, url, testConfig(topicFor(t), lease))
	})
}

func TestConformanceOnKfake(t *testing.T) {
	conformance(t, kfakeURL(t), 300*time.Millisecond) // the engine renews every third of it: 100 ms, with room for -race on a loaded machine
}

func TestConformanceOnKafka(t *testing.T) {
	conformance(t, realURL(t), time.Second)
}

package bench

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// TestBrokerRunDrains: a run with a separate transport counts its
// messages committed from their inbox records (whose message IDs carry
// the message type) and ends, exactly once. Counting by the bare ID
// matched nothing, and every broker run ended "not drained".
func TestBrokerRunDrains(t *testing.T) {
	url := testenv.PostgresURL(t)
	mem := Broker{Name: "mem", New: func(context.Context, string, []string) (transport.Transport, error) {
		return memtransport.New(nil), nil
	}}
	o := Options{URL: url, SchemaPrefix: "brokertest", Messages: 200, Keys: 50, Dup: 0.2, Batches: []int{10}, Lanes: []int{1},
		Consumers: []int{1}, BaselineClients: 2, BaselineBatch: 10, LatencyDuration: time.Second, Seed: 5, Timeout: time.Minute,
		Brokers: []Broker{mem}}
	rep, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.ExactlyOnce {
		t.Fatalf("exactly-once violated: %+v", rep.Runs)
	}
	var broker int
	for _, r := range rep.Runs {
		if r.Transport == "mem" {
			broker++
			if r.TransitionsPerSec <= 0 {
				t.Errorf("broker run %+v: no throughput measured", r)
			}
		}
	}
	if broker != 1 {
		t.Fatalf("%d runs on the broker, want 1: %+v", broker, rep.Runs)
	}
}

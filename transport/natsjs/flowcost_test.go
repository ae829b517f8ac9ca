package natsjs_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/transport/natsjs"
)

// What a limit that never binds costs beside JetStream, on PostgreSQL: a
// plain handler drains 3,000 messages without a limit and with a cap of
// a million, twice each, and the throughput of each run is logged. A
// measurement, not a check: it runs only with IDEM_FLOW_COST=1
// (docs/flow-control.md, "What it costs").
func TestFlowCostBesideJetStream(t *testing.T) {
	if os.Getenv("IDEM_FLOW_COST") == "" {
		t.Skip("a measurement: set IDEM_FLOW_COST=1 to run it")
	}
	for _, limited := range []bool{false, true, false, true} {
		st, _ := openPG(t)
		tr := open(t, natsjs.Config{Stream: randName("COST_"), AckWait: 10 * time.Second})
		cfg := &idem.Config{BatchSize: 16, Lanes: 4}
		if limited {
			cfg.Limits = []idem.Limit{{Name: "nb", MessageTypes: []string{"flowcost.Msg"}, Concurrency: 1000000}}
		}
		var n atomic.Int64
		e := enginetest.NewEngine(t, st, tr, cfg)
		if err := e.Handle("flowcost.Msg", func(context.Context, idem.Envelope) error { n.Add(1); return nil }); err != nil {
			t.Fatal(err)
		}
		const total = 3000
		envs := make([]idem.Envelope, total)
		for i := range envs {
			envs[i] = idem.Envelope{ID: fmt.Sprintf("m%d", i), Type: "flowcost.Msg", CorrelationID: fmt.Sprintf("k%d", i)}
		}
		if err := e.Publish(context.Background(), envs...); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		if err := e.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		enginetest.WaitFor(t, 5*time.Minute, "drained", func() (bool, error) { return n.Load() >= total, nil })
		took := time.Since(began)
		_ = e.Stop(context.Background())
		t.Logf("limited=%v: %d messages in %v: %.0f/s", limited, total, took, total/took.Seconds())
	}
}

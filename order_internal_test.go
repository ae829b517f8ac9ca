package idem

import (
	"context"
	"fmt"
	"testing"

	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// A batch is split into its share of Config.Lanes: with several consumers
// the batches overlap already, and each further lane is one more commit.
func TestPlanSplitsIntoTheBatchShareOfLanes(t *testing.T) {
	for _, tc := range []struct{ lanes, consumers, batch, want int }{
		{lanes: 4, consumers: 1, batch: 64, want: 4},
		{lanes: 4, consumers: 4, batch: 64, want: 1},
		{lanes: 8, consumers: 4, batch: 64, want: 2},
		{lanes: 4, consumers: 3, batch: 64, want: 2},
		{lanes: 4, consumers: 1, batch: 16, want: 1}, // too few messages to split
	} {
		t.Run(fmt.Sprintf("lanes %d consumers %d batch %d", tc.lanes, tc.consumers, tc.batch), func(t *testing.T) {
			e, err := NewEngine(memstore.New(nil), memtransport.New(nil), &Config{Lanes: tc.lanes, Consumers: tc.consumers})
			if err != nil {
				t.Fatal(err)
			}
			if err := e.Handle("test.Ping", func(context.Context, Envelope) error { return nil }); err != nil {
				t.Fatal(err)
			}
			ds := make([]transport.Delivery, tc.batch)
			for i := range ds {
				ds[i].Envelope = Envelope{ID: fmt.Sprintf("m-%d", i), Type: "test.Ping", Body: []byte(`{}`)}
			}
			if got := len(e.plan.plan(ds)); got != tc.want {
				t.Errorf("%d lanes, want %d", got, tc.want)
			}
		})
	}
}

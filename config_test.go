package idem_test

import (
	"runtime"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// unpartitioned hides a transport's ReceivePartition.
type unpartitioned struct{ transport.Transport }

// TestDefaultParallelism: the zero Config runs several single-lane
// consumers on a partitioned transport, and one consumer of several lanes
// on any other; a value the caller set is kept.
func TestDefaultParallelism(t *testing.T) {
	t.Parallel()
	st, mem := memstore.New(nil), memtransport.New(nil)
	t.Cleanup(func() { _ = mem.Close(); _ = st.Close() })
	lanes := 2 * runtime.GOMAXPROCS(0)
	for _, tc := range []struct {
		name                     string
		tr                       transport.Transport
		cfg                      *idem.Config
		wantLanes, wantConsumers int
	}{
		{"partitioned, zero Config", mem, nil, 1, idem.DefaultPartitionedConsumers},
		{"partitioned, Lanes set", mem, &idem.Config{Lanes: 3}, 3, 1},
		{"partitioned, Consumers set", mem, &idem.Config{Consumers: 2}, lanes, 2},
		{"not partitioned, zero Config", unpartitioned{mem}, nil, lanes, 1},
		{"not partitioned, Consumers set", unpartitioned{mem}, &idem.Config{Consumers: 3, Lanes: 2}, 2, 3},
	} {
		e, err := idem.NewEngine(st, tc.tr, tc.cfg)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got := e.Config()
		if got.Lanes != tc.wantLanes || got.Consumers != tc.wantConsumers {
			t.Errorf("%s: Lanes %d, Consumers %d; want %d and %d", tc.name, got.Lanes, got.Consumers, tc.wantLanes, tc.wantConsumers)
		}
		if got.BatchSize != 64 {
			t.Errorf("%s: BatchSize %d, want the default 64", tc.name, got.BatchSize)
		}
	}
}

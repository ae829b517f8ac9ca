package rabbitmq_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/rabbitmq"
)

// A message slower than the Lease: its engine keeps the batch's leases
// alive (the transport's own lease timer), so the transport never
// requeues the batch and the slow message runs once.
func TestSlowBatchKeepsItsLease(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	st := openStore(t)
	ns := namespace(t, 2)
	var trs [2]transport.Transport
	for i := range trs {
		trs[i] = open(t, rabbitmq.Config{Namespace: ns, Partitions: 2, Prefetch: 32, Lease: lease})
	}
	enginetest.SlowBatch(t, enginetest.SlowCase{Stores: [2]store.Store{st, st}, Transports: trs, Lease: lease})
}

package redisstreams_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/redisstreams"
)

// A message slower than the Lease: its engine keeps the batch's leases
// alive (XCLAIM … JUSTID), so the other engine never reclaims the batch
// and the slow message runs once.
func TestSlowBatchKeepsItsLease(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	st, _ := openPG(t)
	ns := namespace(t)
	var trs [2]transport.Transport
	for i := range trs {
		trs[i] = open(t, redisstreams.Config{Namespace: ns, Partitions: 2, Lease: lease})
	}
	enginetest.SlowBatch(t, enginetest.SlowCase{Stores: [2]store.Store{st, st}, Transports: trs, Lease: lease})
}

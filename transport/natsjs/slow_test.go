package natsjs_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
)

// A message slower than AckWait: its engine keeps the batch's leases
// alive (in-progress acknowledgements), so the other engine never takes
// the batch and the slow message runs once.
func TestSlowBatchKeepsItsLease(t *testing.T) {
	t.Parallel()
	const ackWait = time.Second
	st, _ := openPG(t)
	stream := randName("S_")
	first := open(t, natsjs.Config{Stream: stream, AckWait: ackWait})
	second, err := natsjs.Open(context.Background(), sharedServer(t).URL(), &natsjs.Config{Stream: stream, AckWait: ackWait})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close() })
	enginetest.SlowBatch(t, enginetest.SlowCase{Stores: [2]store.Store{st, st}, Transports: [2]transport.Transport{first, second}, Lease: ackWait})
}

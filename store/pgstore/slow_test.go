package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// A message slower than the Lease, on the leased path: its engine keeps
// the batch's leases alive, so the other engine never takes the batch and
// the batch lands once.
func TestSlowBatchKeepsItsLease(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	first := openStore(t, pgstore.Config{Lease: lease})
	second, err := pgstore.Open(context.Background(), testenv.PostgresURL(t), &pgstore.Config{Schema: first.Schema(), Lease: lease, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close() })
	enginetest.SlowBatch(t, enginetest.SlowCase{Stores: [2]store.Store{first, second}, Transports: [2]transport.Transport{first, second}, Lease: lease})
}

// The same on a queue whose leases cannot be kept alive: the slow
// message's batch mates are applied, and the slow message is
// dead-lettered after a bounded number of runs.
func TestSlowBatchWithoutRenewal(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	first := openStore(t, pgstore.Config{Lease: lease})
	second, err := pgstore.Open(context.Background(), testenv.PostgresURL(t), &pgstore.Config{Schema: first.Schema(), Lease: lease, MaxConns: 8})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = second.Close() })
	qs := [2]store.Queue{enginetest.WithoutLeaseRenewal(first), enginetest.WithoutLeaseRenewal(second)}
	enginetest.SlowBatchWithoutRenewal(t, enginetest.SlowCase{Stores: [2]store.Store{qs[0], qs[1]}, Transports: [2]transport.Transport{qs[0], qs[1]}, Lease: lease})
}

package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

// A message slower than the Lease, on the leased path: its engine keeps
// the batch's leases alive, so the other engine (another Store on the
// file, as another process) never takes the batch and the batch lands
// once.
func TestSlowBatchKeepsItsLease(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	path := filepath.Join(t.TempDir(), "idem.db")
	var sts [2]*sqlitestore.Store
	for i := range sts {
		st, err := sqlitestore.Open(context.Background(), path, &sqlitestore.Config{Lease: lease, PollInterval: 20 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		sts[i] = st
	}
	enginetest.SlowBatch(t, enginetest.SlowCase{Stores: [2]store.Store{sts[0], sts[1]}, Transports: [2]transport.Transport{sts[0], sts[1]}, Lease: lease})
}

// The same on a queue whose leases cannot be kept alive: the slow
// message's batch mates are applied, and the slow message is
// dead-lettered after a bounded number of runs.
func TestSlowBatchWithoutRenewal(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	path := filepath.Join(t.TempDir(), "idem.db")
	var qs [2]store.Queue
	for i := range qs {
		st, err := sqlitestore.Open(context.Background(), path, &sqlitestore.Config{Lease: lease, PollInterval: 20 * time.Millisecond, Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		qs[i] = enginetest.WithoutLeaseRenewal(st)
	}
	enginetest.SlowBatchWithoutRenewal(t, enginetest.SlowCase{Stores: [2]store.Store{qs[0], qs[1]}, Transports: [2]transport.Transport{qs[0], qs[1]}, Lease: lease})
}

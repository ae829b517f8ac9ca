package torture

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// The fault wrappers keep a transport's lease renewal
// (transport.LeaseExtender), so that torture runs the engine's renewals:
// on a store that is its own queue and on a separate transport. A stall
// that starves the renewals withholds them.
func TestWrapKeepsLeaseRenewal(t *testing.T) {
	ctx := context.Background()
	sq, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "w.db"), &sqlitestore.Config{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sq.Close() })
	mt := memtransport.New(&memtransport.Config{Lease: time.Minute})
	t.Cleanup(func() { _ = mt.Close() })
	for _, tc := range []struct {
		name string
		st   store.Store
		tr   transport.Transport
	}{
		{"store queue", sq, sq},
		{"transport", memstore.New(nil), mt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "faults")
			f := &faults{cfg: workerConfig{FaultLog: log}}
			_, wtr := wrap(tc.st, tc.tr, f)
			ext, ok := wtr.(transport.LeaseExtender)
			if !ok {
				t.Fatalf("wrap(%T) hides transport.LeaseExtender: got %T", tc.tr, wtr)
			}
			if got := ext.LeaseDuration(); got != time.Minute {
				t.Errorf("LeaseDuration() = %v, want the wrapped transport's 1m", got)
			}
			if err := wtr.Publish(ctx, []transport.Envelope{{ID: "w-1", Type: "T", Body: []byte(`{}`)}}); err != nil {
				t.Fatal(err)
			}
			ds, err := wtr.Receive(ctx, 1)
			if err != nil || len(ds) != 1 {
				t.Fatalf("Receive: %v, %v", ds, err)
			}
			f.renewing(time.Minute)
			if err := ext.ExtendLeases(ctx, ds); err != nil {
				t.Errorf("ExtendLeases through the wrapper: %v", err)
			}
			if b, err := os.ReadFile(log); err != nil || string(b) != faultRenewedStall+"\n" {
				t.Errorf("fault log after a renewal in a stall: %q, %v; want %q", b, err, faultRenewedStall+"\n")
			}
			f.starve(time.Minute)
			if err := ext.ExtendLeases(ctx, ds); !errors.Is(err, errRenewalWithheld) {
				t.Errorf("ExtendLeases during a starving stall: got %v, want errRenewalWithheld", err)
			}
			if err := wtr.Ack(ctx, ds); err != nil {
				t.Fatal(err)
			}
		})
	}
}

package sqlitestore_test

import (
	"context"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/store/storetest"
)

// Two stores on one file (two processes on one host) measure timer and
// outbox claims on the host's clock, not on the engines' clocks.
func TestSharedClockConformance(t *testing.T) {
	storetest.RunSharedClock(t, func(t *testing.T) (store.Store, store.Store) {
		a := openStore(t, sqlitestore.Config{})
		b, err := sqlitestore.Open(context.Background(), a.Path(), &sqlitestore.Config{Logger: quiet})
		if err != nil {
			t.Fatalf("open a second store on %s: %v", a.Path(), err)
		}
		return a, b
	})
}

package pgstore_test

import (
	"context"
	"testing"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/storetest"
)

// Two replicas on one schema measure timer and outbox claims on the
// database's clock: one whose clock runs ahead does not take back the
// other's claims.
func TestSharedClockConformance(t *testing.T) {
	url := testenv.PostgresURL(t)
	storetest.RunSharedClock(t, func(t *testing.T) (store.Store, store.Store) {
		a := openStore(t, pgstore.Config{})
		b, err := pgstore.Open(context.Background(), url, &pgstore.Config{Schema: a.Schema()})
		if err != nil {
			t.Fatalf("open a second store on schema %s: %v", a.Schema(), err)
		}
		return a, b
	})
}

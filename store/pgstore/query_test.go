package pgstore_test

import (
	"testing"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/storetest"
)

func TestInstanceQuerierConformance(t *testing.T) {
	testenv.PostgresURL(t)
	storetest.RunInstanceQuerier(t, func(t *testing.T) store.Store { return openStore(t, pgstore.Config{}) })
}

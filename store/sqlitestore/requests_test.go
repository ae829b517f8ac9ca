package sqlitestore_test

import (
	"testing"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// Requests and fault events, with two engines sharing the store.
func TestRequestsAndFaults(t *testing.T) {
	t.Parallel()
	enginetest.Requests(t, func(t *testing.T) store.Store { return openStore(t, sqlitestore.Config{}) })
}

// A request's fault, with the store as the queue of two engines.
func TestRequestsOnQueue(t *testing.T) {
	t.Parallel()
	enginetest.RequestsOnQueue(t, openStore(t, sqlitestore.Config{}))
}

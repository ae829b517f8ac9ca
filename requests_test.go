package idem_test

import (
	"testing"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
)

// Requests and fault events on memstore; the SQL stores run the same
// scenarios in their packages.
func TestRequestsAndFaults(t *testing.T) {
	t.Parallel()
	enginetest.Requests(t, func(t *testing.T) store.Store {
		st := memstore.New(nil)
		t.Cleanup(func() { _ = st.Close() })
		return st
	})
}

package pgstore_test

import (
	"testing"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// A duplicate delivered after the retention sweep is recognised under the
// token inbox and applied again under the retention inbox.
func TestLateDuplicateTokenInbox(t *testing.T) {
	enginetest.LateDuplicate(t, func(t *testing.T) store.Queue {
		return openStore(t, pgstore.Config{})
	})
}

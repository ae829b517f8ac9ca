package sqlitestore_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// A duplicate delivered after the retention sweep is recognised under the
// token inbox and applied again under the retention inbox.
func TestLateDuplicateTokenInbox(t *testing.T) {
	enginetest.LateDuplicate(t, func(t *testing.T) store.Queue {
		return openStore(t, sqlitestore.Config{PollInterval: 20 * time.Millisecond})
	})
}

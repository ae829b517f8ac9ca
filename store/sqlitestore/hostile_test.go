package sqlitestore_test

import (
	"testing"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// Hostile envelope fields end as dead letters with named reasons, and a
// state holding U+0000 is kept exactly.
func TestHostileInputIsDeadLettered(t *testing.T) {
	t.Parallel()
	enginetest.HostileInput(t, func(t *testing.T) store.Store { return openStore(t, sqlitestore.Config{}) })
}

package sqlitestore_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store/sqlitestore"
)

// The eager pass racing the new build's engine migrates each saga once.
func TestEagerMigrationRacesTheEngine(t *testing.T) {
	enginetest.EagerMigration(t, openStore(t, sqlitestore.Config{PollInterval: 5 * time.Millisecond}))
}

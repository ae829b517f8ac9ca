package sqlitestore_test

import (
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/store/storetest"
)

func TestDeadLetterQuerierConformance(t *testing.T) {
	storetest.RunDeadLetterQuerier(t, func(t *testing.T) store.Store { return openStore(t, sqlitestore.Config{}) })
}

func TestDeadLetterReplayerConformance(t *testing.T) {
	storetest.RunDeadLetterReplayer(t, func(t *testing.T) store.Store { return openStore(t, sqlitestore.Config{}) })
}

package sqlitestore_test

import (
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/store/storetest"
)

func TestTimerQuerierConformance(t *testing.T) {
	storetest.RunTimerQuerier(t, func(t *testing.T) store.Store { return openStore(t, sqlitestore.Config{}) })
}

func TestQueryCounterConformance(t *testing.T) {
	storetest.RunQueryCounter(t, func(t *testing.T) store.Store { return openStore(t, sqlitestore.Config{}) })
}

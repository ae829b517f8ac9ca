package pgstore_test

import (
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/storetest"
)

func TestDeadLetterStateConformance(t *testing.T) {
	storetest.RunDeadLetterState(t, func(t *testing.T) store.Store { return openStore(t, pgstore.Config{}) })
}

package memstore_test

import (
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/storetest"
)

func TestDeadLetterQuerierConformance(t *testing.T) {
	storetest.RunDeadLetterQuerier(t, func(t *testing.T) store.Store { return memstore.New(nil) })
}

func TestDeadLetterReplayerConformance(t *testing.T) {
	storetest.RunDeadLetterReplayer(t, func(t *testing.T) store.Store { return memstore.New(nil) })
}

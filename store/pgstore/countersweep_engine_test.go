package pgstore_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store/pgstore"
)

// The engine's sweeper deletes the counters of a keyed limit once their
// buckets are full again and no call holds a slot
// (enginetest.CounterSweep).
func TestEngineSweepsIdleLimitCounters(t *testing.T) {
	t.Parallel()
	enginetest.CounterSweep(t, openStore(t, pgstore.Config{Lease: time.Hour, PollInterval: 20 * time.Millisecond}))
}

package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// heldMigrator is a store.StateMigrator whose first calls move nothing
// while sagas remain in From: units of work in flight hold them, and
// PostgreSQL's pass skips held sagas.
type heldMigrator struct {
	left, held int // sagas in From; calls that find them all held
	calls      int
}

func (m *heldMigrator) MigrateStates(_ context.Context, p *store.MigrateStatesParams) (int, error) {
	m.calls++
	if m.calls <= m.held {
		return 0, nil
	}
	n := min(p.Limit, m.left)
	m.left -= n
	return n, nil
}

func (m *heldMigrator) CountState(context.Context, string, string) (int64, error) {
	return int64(m.left), nil
}

// The pass waits out sagas held by units of work in flight instead of
// stopping at the first empty calls, and when they stay held it says how
// many are left to migrate on load.
func TestMigrateAllWaitsOutHeldSagas(t *testing.T) {
	defer func(d time.Duration) { emptyBatchWait = d }(emptyBatchWait)
	emptyBatchWait = time.Millisecond
	sm := &heldMigrator{left: 7, held: 4}
	m := &stateMove{SagaType: "order", From: "Old", To: "Open", count: 7}
	if err := migrateAll(t.Context(), sm, m, 3, func(int) {}); err != nil {
		t.Fatal(err)
	}
	if m.moved != 7 || sm.left != 0 {
		t.Fatalf("moved %d, %d left after %d calls: want all 7 moved once the units of work let go", m.moved, sm.left, sm.calls)
	}

	stuck := &heldMigrator{left: 5, held: 1 << 30}
	m = &stateMove{SagaType: "order", From: "Old", To: "Open", count: 5}
	if err := migrateAll(t.Context(), stuck, m, 3, func(int) {}); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	writeMoves(&out, []*stateMove{m}, false)
	if m.left != 5 || !strings.Contains(out.String(), "5 left, held by units of work in flight") {
		t.Fatalf("left %d, report:\n%s\nwant the 5 held sagas named", m.left, out.String())
	}
}

package pgstore_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/readmodel"
)

// EstimateRows follows the planner's statistics: after an ANALYZE, the
// inbox's rows, and an empty table as 0; every table of the schema named.
func TestEstimateRows(t *testing.T) {
	s := openStore(t, pgstore.Config{})
	ctx := t.Context()
	const n = 5_000
	at := time.Now().UTC()
	c := &store.Changes{}
	for i := range n {
		k := fmt.Sprintf("key-%05d", i)
		c.Inbox = append(c.Inbox, store.InboxEntry{InboxKey: store.InboxKey{SagaType: "order", Key: k, MessageID: "m-" + k}, ProcessedAt: at})
	}
	uow, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, c); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pool().Exec(ctx, `ANALYZE idem_inbox, idem_timers`); err != nil {
		t.Fatal(err)
	}
	rows, err := s.EstimateRows(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := rows[readmodel.TableInbox]; got < n*8/10 || got > n*12/10 {
		t.Errorf("EstimateRows()[inbox] = %d after ANALYZE, want %d ± 20%%", got, n)
	}
	if got, ok := rows[readmodel.TableTimers]; !ok || got != 0 {
		t.Errorf("EstimateRows()[timers] = %d (present %v), want 0", got, ok)
	}
	if len(rows) != 10 {
		t.Errorf("EstimateRows() = %v, want the 10 tables of the schema", rows)
	}
}

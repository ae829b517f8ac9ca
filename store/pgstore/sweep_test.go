package pgstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// TestSweepLeavesOrphanInboxUntilInstancesCaughtUp: while finished sagas
// past retention are left, a sweep call deletes them (with their inbox
// records) and does not look for orphan inbox records. That search scans
// every inbox record older than retention, those of the finished sagas not
// yet swept included, and hashes the whole instances table: run in every
// batch, it made sweeping a million finished sagas quadratic (7 s per batch
// of 1,000 at 200,000 left, against 2 s for the batch's deletes). The
// orphans go in the call that finds fewer finished sagas than its limit.
func TestSweepLeavesOrphanInboxUntilInstancesCaughtUp(t *testing.T) {
	s := openStore(t, pgstore.Config{})
	ctx := context.Background()
	old := time.Now().Add(-30 * 24 * time.Hour).UTC()
	const finished, orphans, limit = 25, 7, 10
	c := &store.Changes{}
	for i := range finished {
		k := fmt.Sprintf("done-%d", i)
		c.Inserts = append(c.Inserts, &store.Instance{SagaType: "order", Key: k, State: "Done", Data: []byte(`{}`), SchemaVersion: 1, Version: 1,
			CreatedAt: old, UpdatedAt: old, FinishedAt: old})
		c.Inbox = append(c.Inbox, store.InboxEntry{InboxKey: store.InboxKey{SagaType: "order", Key: k, MessageID: "m-" + k}, ProcessedAt: old})
	}
	for i := range orphans {
		c.Inbox = append(c.Inbox, store.InboxEntry{InboxKey: store.InboxKey{SagaType: "handler", Key: "", MessageID: fmt.Sprintf("h-%d", i)}, ProcessedAt: old})
	}
	u, err := s.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.Commit(ctx, c); err != nil {
		_ = u.Rollback(ctx)
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-7 * 24 * time.Hour)
	var got []store.SweepResult
	for {
		res, err := s.Sweep(ctx, &store.SweepParams{FinishedBefore: cutoff, InboxBefore: cutoff, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, *res)
		if res.Instances < limit && res.Inbox < limit {
			break
		}
	}
	want := []store.SweepResult{{Instances: 10}, {Instances: 10}, {Instances: 5, Inbox: orphans}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("sweep calls deleted %v, want %v (orphans only once the finished sagas are caught up)", got, want)
	}
}

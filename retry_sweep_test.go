package idem_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// The sweeper deletes, in batches of Config.SweepBatch, the retries whose
// next attempt is older than Config.Retention (their message never came
// back: the transport dropped it), and keeps the younger ones.
func TestSweepDeletesRetriesPastRetention(t *testing.T) {
	ctx := context.Background()
	st := memstore.New(nil)
	defer st.Close()
	tr := memtransport.New(nil)
	defer tr.Close()
	now := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	e, err := idem.NewEngine(st, tr, &idem.Config{Clock: func() time.Time { return now }, Retention: 24 * time.Hour, SweepBatch: 1})
	if err != nil {
		t.Fatal(err)
	}
	retry := func(id string, next time.Time) {
		t.Helper()
		r := store.Retry{ID: id, SagaType: "order", Key: "k", MessageID: id, MessageType: "test.Ping", Attempts: 1, Error: "boom",
			FirstFailedAt: next.Add(-time.Second), LastFailedAt: next.Add(-time.Second), NextAttemptAt: next}
		if err := st.RecordRetry(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	retry("old-1", now.Add(-48*time.Hour))
	retry("old-2", now.Add(-25*time.Hour))
	retry("old-3", now.Add(-24*time.Hour-time.Microsecond))
	retry("young", now.Add(-23*time.Hour))
	if _, err := e.Sweep(ctx); err != nil {
		t.Fatalf("sweep: got error %v, want nil", err)
	}
	rs, err := st.QueryRetries(ctx, &store.RetryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].ID != "young" {
		t.Fatalf("after a sweep with a 24h retention: retries %+v, want the young one only", rs)
	}
}

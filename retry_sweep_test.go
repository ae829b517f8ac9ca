package idem_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// The sweeper deletes, in batches of Config.SweepBatch, the retries whose
// next attempt is older than Config.Retention (their message never came
// back: the transport dropped it), and keeps the younger ones.
func TestSweepDeletesRetriesPastRetention(t *testing.T) {
	r := newSweepRig(t, idem.Config{Retention: 24 * time.Hour})
	retry := func(id string, next time.Time) {
		t.Helper()
		rt := store.Retry{ID: id, SagaType: "order", Key: "k", MessageID: id, MessageType: "test.Ping", Attempts: 1, Error: "boom",
			FirstFailedAt: next.Add(-time.Second), LastFailedAt: next.Add(-time.Second), NextAttemptAt: next}
		if err := r.st.RecordRetry(r.ctx, &rt); err != nil {
			t.Fatal(err)
		}
	}
	retry("old-1", r.now.Add(-48*time.Hour))
	retry("old-2", r.now.Add(-25*time.Hour))
	retry("old-3", r.now.Add(-24*time.Hour-time.Microsecond))
	retry("young", r.now.Add(-23*time.Hour))
	r.sweep(t)
	rs, err := r.st.QueryRetries(r.ctx, &store.RetryQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].ID != "young" {
		t.Fatalf("after a sweep with a 24h retention: retries %+v, want the young one only", rs)
	}
}

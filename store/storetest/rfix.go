package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// Recording an earlier failure after a later one (a late write) changes
// nothing, by RecordRetry or in a commit; equal attempts replace.
func testRetriesUpsertNeverGoesBack(t *testing.T, s store.Store, rr store.RetryRecorder) {
	t0 := now()
	k := key("order", "k1")
	second := newRetry("r1", k.SagaType, k.Key, 2, t0.Add(time.Second))
	second.FirstFailedAt = t0
	recordRetry(t, rr, newRetry("r1", k.SagaType, k.Key, 1, t0))
	recordRetry(t, rr, second)
	late := newRetry("r1", k.SagaType, k.Key, 1, t0.Add(5*time.Second))
	recordRetry(t, rr, late)
	got := retriesOf(t, rr, k)
	if len(got) != 1 {
		t.Fatalf("got retries %v, want [r1]", retryIDs(got))
	}
	checkRetry(t, "after a late RecordRetry of attempt 1 over attempt 2", got[0], second)

	commit(t, s, &store.Changes{RecordRetries: []store.Retry{late}})
	got = retriesOf(t, rr, k)
	if len(got) != 1 {
		t.Fatalf("got retries %v, want [r1]", retryIDs(got))
	}
	checkRetry(t, "after a late commit of attempt 1 over attempt 2", got[0], second)

	same := newRetry("r1", k.SagaType, k.Key, 2, t0.Add(7*time.Second))
	same.Error = "attempt 2 again: boom"
	recordRetry(t, rr, same)
	want := same
	want.FirstFailedAt = t0
	got = retriesOf(t, rr, k)
	if len(got) != 1 {
		t.Fatalf("got retries %v, want [r1]", retryIDs(got))
	}
	checkRetry(t, "after recording attempt 2 again", got[0], want)
}

// Changes.RecordRetries records retries in the commit, as RecordRetry
// would (FirstFailedAt kept), only when it commits: a commit that fails,
// or a unit of work rolled back, records nothing; a retry Validate refuses
// fails the commit with store.ErrRejected, and nothing of it is written.
func testRetriesRecordedInCommit(t *testing.T, s store.Store, rr store.RetryRecorder) {
	t0 := now()
	k := key("order", "k1")
	r1 := newRetry("r1", k.SagaType, k.Key, 1, t0)
	inbox := store.InboxEntry{InboxKey: store.InboxKey{SagaType: k.SagaType, Key: k.Key, MessageID: "m-other"}, ProcessedAt: t0}
	commit(t, s, &store.Changes{Inbox: []store.InboxEntry{inbox}, RecordRetries: []store.Retry{r1}})
	if got := retriesOf(t, rr, k); len(got) != 1 {
		t.Fatalf("after a commit recording r1: got retries %v, want [r1]", retryIDs(got))
	} else {
		checkRetry(t, "r1 recorded in a commit", got[0], r1)
	}

	// A commit that fails records nothing, and leaves r1 as it was.
	t1 := t0.Add(2 * time.Second)
	err := tryCommit(t, s, &store.Changes{
		Updates:       []*store.Instance{newInstance("order", "missing", t0)},
		RecordRetries: []store.Retry{newRetry("r1", k.SagaType, k.Key, 2, t1), newRetry("r2", k.SagaType, k.Key, 1, t1)},
	})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("commit updating a missing instance: got error %v, want one wrapping store.ErrConflict", err)
	}
	got := retriesOf(t, rr, k)
	checkStrings(t, "retries after a failed commit", retryIDs(got), []string{"r1"})
	if len(got) == 1 {
		checkRetry(t, "r1 after a failed commit", got[0], r1)
	}

	// A unit of work rolled back records nothing.
	uow := begin(t, s)
	if err := uow.Rollback(t.Context()); err != nil {
		t.Fatalf("rollback: got error %v, want nil", err)
	}
	checkStrings(t, "retries after a rollback", retryIDs(retriesOf(t, rr, k)), []string{"r1"})

	// A refused retry fails the whole commit.
	bad := newRetry("r-bad\x00", k.SagaType, k.Key, 1, t1)
	err = tryCommit(t, s, &store.Changes{
		Inbox:         []store.InboxEntry{{InboxKey: store.InboxKey{SagaType: k.SagaType, Key: k.Key, MessageID: "m-bad"}, ProcessedAt: t1}},
		RecordRetries: []store.Retry{newRetry("r3", k.SagaType, k.Key, 1, t1), bad},
	})
	if !errors.Is(err, store.ErrRejected) {
		t.Fatalf("commit recording a retry with U+0000 in its ID: got error %v, want one wrapping store.ErrRejected", err)
	}
	checkStrings(t, "retries after a refused commit", retryIDs(retriesOf(t, rr, k)), []string{"r1"})
	uow = begin(t, s)
	defer func() { _ = uow.Rollback(t.Context()) }()
	seen := loadIn(t, uow, &store.LoadParams{Inbox: []store.InboxKey{inbox.InboxKey, {SagaType: k.SagaType, Key: k.Key, MessageID: "m-bad"}}}).Seen
	if !seen[inbox.InboxKey] || seen[store.InboxKey{SagaType: k.SagaType, Key: k.Key, MessageID: "m-bad"}] {
		t.Errorf("inbox after the commits: %v; want m-other only (the refused commit wrote nothing)", seen)
	}

	// Recorded again in a commit: replaced, FirstFailedAt kept.
	again := newRetry("r1", k.SagaType, k.Key, 2, t1)
	commit(t, s, &store.Changes{RecordRetries: []store.Retry{again}})
	want := again
	want.FirstFailedAt = t0
	if got := retriesOf(t, rr, k); len(got) != 1 {
		t.Fatalf("after recording r1 again: got retries %v, want [r1]", retryIDs(got))
	} else {
		checkRetry(t, "r1 recorded again in a commit", got[0], want)
	}
}

// SweepRetries deletes, oldest first and at most Limit at a time, the
// retries whose next attempt is before the cutoff, and keeps the others;
// bad parameters are refused.
func testRetriesSweep(t *testing.T, s store.Store, rr store.RetryRecorder) {
	sw, ok := s.(store.RetrySweeper)
	if !ok {
		t.Skipf("%T does not implement store.RetrySweeper", s)
	}
	t0 := now()
	k := key("order", "k1")
	// newRetry's next attempt is at + attempts seconds.
	recordRetry(t, rr, newRetry("old-b", k.SagaType, k.Key, 1, t0.Add(-time.Hour)))
	recordRetry(t, rr, newRetry("old-a", k.SagaType, k.Key, 1, t0.Add(-2*time.Hour)))
	recordRetry(t, rr, newRetry("at-cut", k.SagaType, k.Key, 1, t0.Add(-time.Second)))
	recordRetry(t, rr, newRetry("new", k.SagaType, k.Key, 1, t0))
	sweep := func(p *store.StaleRetries) int {
		t.Helper()
		n, err := sw.SweepRetries(t.Context(), p)
		if err != nil {
			t.Fatalf("SweepRetries %+v: got error %v, want nil", p, err)
		}
		return n
	}
	if n := sweep(&store.StaleRetries{Limit: 10}); n != 0 {
		t.Errorf("SweepRetries with a zero cutoff deleted %d, want 0", n)
	}
	p := &store.StaleRetries{NextAttemptBefore: t0, Limit: 1}
	if n := sweep(p); n != 1 {
		t.Fatalf("first sweep deleted %d, want 1 (Limit)", n)
	}
	checkStrings(t, "after the first sweep (oldest first)", retryIDs(retriesOf(t, rr, k)), []string{"old-b", "at-cut", "new"})
	if n := sweep(p); n != 1 {
		t.Fatalf("second sweep deleted %d, want 1", n)
	}
	if n := sweep(p); n != 0 {
		t.Fatalf("third sweep deleted %d, want 0: at-cut's next attempt is at the cutoff, not before", n)
	}
	checkStrings(t, "after sweeping", retryIDs(retriesOf(t, rr, k)), []string{"at-cut", "new"})
	for _, bad := range []*store.StaleRetries{nil, {NextAttemptBefore: t0, Limit: 0}} {
		if _, err := sw.SweepRetries(t.Context(), bad); err == nil {
			t.Errorf("SweepRetries %+v: got nil error, want one naming the bad parameter", bad)
		}
	}
}

package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// retryCases check store.RetryRecorder and Changes.ClearRetries. They run
// for every store that implements store.RetryRecorder (found by type
// assertion, so an implemented capability is never left untested) and
// skip for the others.
var retryCases = []testCase{
	{"RetriesUpsertKeepsFirstFailedAt", retriesOnly(testRetriesUpsertKeepsFirstFailedAt)},
	{"RetriesClearedInCommit", retriesOnly(testRetriesClearedInCommit)},
	{"RetriesHostileStrings", retriesOnly(testRetriesHostileStrings)},
	{"RetriesPaging", retriesOnly(testRetriesPaging)},
	{"RetriesUpsertNeverGoesBack", retriesOnly(testRetriesUpsertNeverGoesBack)},
	{"RetriesRecordedInCommit", retriesOnly(testRetriesRecordedInCommit)},
	{"RetriesSweep", retriesOnly(testRetriesSweep)},
}

func retriesOnly(fn func(t *testing.T, s store.Store, rr store.RetryRecorder)) func(t *testing.T, s store.Store) {
	return func(t *testing.T, s store.Store) {
		rr, ok := s.(store.RetryRecorder)
		if !ok {
			t.Skipf("%T does not implement store.RetryRecorder", s)
		}
		fn(t, s, rr)
	}
}

func newRetry(id, sagaType, k string, attempts int, at time.Time) store.Retry {
	return store.Retry{
		ID: id, SagaType: sagaType, Key: k, MessageID: "m-" + id, MessageType: "test.Ping",
		Attempts: attempts, Error: fmt.Sprintf("attempt %d: boom", attempts),
		FirstFailedAt: at, LastFailedAt: at, NextAttemptAt: at.Add(time.Duration(attempts) * time.Second),
	}
}

func recordRetry(t *testing.T, rr store.RetryRecorder, r store.Retry) {
	t.Helper()
	if err := rr.RecordRetry(t.Context(), &r); err != nil {
		t.Fatalf("RecordRetry %q: got error %v, want nil", r.ID, err)
	}
}

func retriesOf(t *testing.T, rr store.RetryRecorder, k store.Key) []store.Retry {
	t.Helper()
	got, err := rr.Retries(t.Context(), k)
	if err != nil {
		t.Fatalf("Retries %s/%s: got error %v, want nil", k.SagaType, k.Key, err)
	}
	return got
}

func checkRetry(t *testing.T, what string, got, want store.Retry) {
	t.Helper()
	if got.ID != want.ID || got.SagaType != want.SagaType || got.Key != want.Key || got.MessageID != want.MessageID ||
		got.MessageType != want.MessageType || got.Attempts != want.Attempts || got.Error != want.Error ||
		!got.FirstFailedAt.Equal(want.FirstFailedAt) || !got.LastFailedAt.Equal(want.LastFailedAt) || !got.NextAttemptAt.Equal(want.NextAttemptAt) {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func retryIDs(rs []store.Retry) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.ID
	}
	return ids
}

// Recording a retry again replaces it but keeps its FirstFailedAt; a
// retry of another saga is not listed with it.
func testRetriesUpsertKeepsFirstFailedAt(t *testing.T, _ store.Store, rr store.RetryRecorder) {
	t0 := now()
	k := key("order", "k1")
	recordRetry(t, rr, newRetry("r1", k.SagaType, k.Key, 1, t0))
	recordRetry(t, rr, newRetry("other", k.SagaType, "k2", 1, t0))
	if got := retriesOf(t, rr, k); len(got) != 1 {
		t.Fatalf("after one failure: got retries %v, want [r1]", retryIDs(got))
	} else {
		checkRetry(t, "after one failure", got[0], newRetry("r1", k.SagaType, k.Key, 1, t0))
	}
	t1 := t0.Add(3 * time.Second)
	again := newRetry("r1", k.SagaType, k.Key, 2, t1)
	recordRetry(t, rr, again)
	got := retriesOf(t, rr, k)
	if len(got) != 1 {
		t.Fatalf("after the second failure: got retries %v, want [r1] once", retryIDs(got))
	}
	want := again
	want.FirstFailedAt = t0
	checkRetry(t, "after the second failure", got[0], want)
}

// Changes.ClearRetries deletes retries in the commit, only when it
// commits; a missing ID is not an error.
func testRetriesClearedInCommit(t *testing.T, s store.Store, rr store.RetryRecorder) {
	t0 := now()
	k := key("order", "k1")
	recordRetry(t, rr, newRetry("r1", k.SagaType, k.Key, 1, t0))
	recordRetry(t, rr, newRetry("r2", k.SagaType, k.Key, 1, t0.Add(time.Second)))

	// A commit that fails clears nothing.
	err := tryCommit(t, s, &store.Changes{Updates: []*store.Instance{newInstance("order", "missing", t0)}, ClearRetries: []string{"r1"}})
	if !errors.Is(err, store.ErrConflict) {
		t.Fatalf("commit updating a missing instance: got error %v, want one wrapping store.ErrConflict", err)
	}
	checkStrings(t, "retries after a failed commit", retryIDs(retriesOf(t, rr, k)), []string{"r1", "r2"})

	commit(t, s, &store.Changes{
		Inbox:        []store.InboxEntry{{InboxKey: store.InboxKey{SagaType: k.SagaType, Key: k.Key, MessageID: "m-r1"}, ProcessedAt: t0}},
		ClearRetries: []string{"r1", "never-recorded"},
	})
	checkStrings(t, "retries after clearing r1", retryIDs(retriesOf(t, rr, k)), []string{"r2"})
	commit(t, s, &store.Changes{ClearRetries: []string{"r2"}})
	checkStrings(t, "retries after clearing r2 alone", retryIDs(retriesOf(t, rr, k)), nil)
}

// Hostile strings: an error chain with U+0000, invalid UTF-8, markup and
// more than MaxRetryErrorBytes is stored as RetryText makes it; markup and
// quotes in identities round-trip; an identity no store can hold is
// refused with store.ErrRejected, and reading by such a key finds nothing
// without an error.
func testRetriesHostileStrings(t *testing.T, _ store.Store, rr store.RetryRecorder) {
	t0 := now()
	k := key("order", `<script>alert("k")</script>'&`)
	r := newRetry(`id-<b>"'`, k.SagaType, k.Key, 3, t0)
	r.MessageType = "test.<i>Ping</i>"
	r.Error = "handler: \x00 bad \xff byte <script>alert(1)</script> " + strings.Repeat("é", store.MaxRetryErrorBytes)
	recordRetry(t, rr, r)
	want := r
	want.Error = store.RetryText(r.Error)
	if !strings.HasPrefix(want.Error, `handler: \x00 bad `+"\uFFFD"+" byte <script>") || len(want.Error) > store.MaxRetryErrorBytes {
		t.Fatalf("RetryText: got %.80q… (%d bytes), want the NUL escaped, U+FFFD, markup kept, at most %d bytes", want.Error, len(want.Error), store.MaxRetryErrorBytes)
	}
	got := retriesOf(t, rr, k)
	if len(got) != 1 {
		t.Fatalf("got %d retries, want 1", len(got))
	}
	checkRetry(t, "hostile retry", got[0], want)

	for _, bad := range []store.Retry{
		newRetry("nul\x00id", "order", "k", 1, t0),
		newRetry("r-bad-key", "order", "k\x00", 1, t0),
		newRetry("r-bad-type", "order", "k", 1, t0),
		newRetry("", "order", "k", 1, t0),
		newRetry("r-zero", "order", "k", 0, t0),
	} {
		if bad.ID == "r-bad-type" {
			bad.MessageType = "test.\xffPing"
		}
		if err := rr.RecordRetry(t.Context(), &bad); !errors.Is(err, store.ErrRejected) {
			t.Errorf("RecordRetry %+q: got error %v, want one wrapping store.ErrRejected", bad.ID, err)
		}
	}
	if got := retriesOf(t, rr, key("order", "k")); len(got) != 0 {
		t.Errorf("refused retries were written: %v", retryIDs(got))
	}
	if got := retriesOf(t, rr, key("order\x00", "k\x00\xff")); len(got) != 0 {
		t.Errorf("Retries of an unstorable key: got %v, want none", retryIDs(got))
	}
}

// QueryRetries pages every retry by (FirstFailedAt, ID), filtered by saga
// type, and a page is bounded.
func testRetriesPaging(t *testing.T, _ store.Store, rr store.RetryRecorder) {
	t0 := now()
	var want []string
	for i, at := range []time.Duration{3, 1, 1, 2, 0, 1, 5} {
		id := fmt.Sprintf("r%d", i)
		typ := "order"
		if i == 6 {
			typ = "invoice"
		}
		recordRetry(t, rr, newRetry(id, typ, fmt.Sprintf("k%d", i), 1, t0.Add(at*time.Second)))
	}
	want = []string{"r4", "r1", "r2", "r5", "r3", "r0", "r6"}
	var all []string
	q := &store.RetryQuery{Limit: 3}
	for page := 0; ; page++ {
		if page > 5 {
			t.Fatalf("paging does not end: %v so far", all)
		}
		got, err := rr.QueryRetries(t.Context(), q)
		if err != nil {
			t.Fatalf("QueryRetries: got error %v, want nil", err)
		}
		if len(got) > 3 {
			t.Fatalf("page %d: got %d retries, want at most Limit 3", page, len(got))
		}
		all = append(all, retryIDs(got)...)
		if len(got) < 3 {
			break
		}
		last := got[len(got)-1]
		q.AfterFirstFailedAt, q.AfterID = last.FirstFailedAt, last.ID
	}
	checkStrings(t, "retries paged by (first failed, ID)", all, want)
	got, err := rr.QueryRetries(t.Context(), &store.RetryQuery{SagaType: "invoice"})
	if err != nil {
		t.Fatalf("QueryRetries of one saga type: got error %v, want nil", err)
	}
	checkStrings(t, "retries of saga type invoice", retryIDs(got), []string{"r6"})
	got, err = rr.QueryRetries(t.Context(), &store.RetryQuery{})
	if err != nil {
		t.Fatalf("QueryRetries, zero query: got error %v, want nil", err)
	}
	checkStrings(t, "zero query (default page)", retryIDs(got), want)
}

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

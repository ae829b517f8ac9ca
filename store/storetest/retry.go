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

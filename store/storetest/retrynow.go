package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// retryNowCases check what retry now needs of a store.RetryRecorder: the
// envelope kept with the retry, and a failure after a retry now recorded
// whatever its attempts. They join retryCases, so they run wherever those
// do.
var retryNowCases = []testCase{
	{"RetriesKeepEnvelope", retriesOnly(testRetriesKeepEnvelope)},
	{"RetriesAfterRetryNow", retriesOnly(testRetriesAfterRetryNow)},
}

func init() { retryCases = append(retryCases, retryNowCases...) }

// hostileEnvelope is an envelope with U+0000, markup and binary bytes
// wherever a dead letter keeps them.
func hostileEnvelope(at time.Time) transport.Envelope {
	env := envelope("hostile\x00id", at)
	env.Type = "test.Ping\x00"
	env.CorrelationID = "corr\x00<b>"
	env.IdempotencyKey = "idem\x00"
	env.Headers["x-\x00"] = "<script>alert(1)</script>"
	env.Body = []byte("{\"text\":\"a\\u0000b\"}\x00\xff")
	return env
}

func retryEnvelope(t *testing.T, what string, got store.Retry, want *transport.Envelope) {
	t.Helper()
	if !reflect.DeepEqual(got.Envelope, want) {
		t.Errorf("%s: envelope\n got %#v\nwant %#v", what, got.Envelope, want)
	}
}

// A retry keeps its message's envelope, hostile bytes included, whether
// recorded on its own or in a commit, and reads it back from Retries and
// QueryRetries; a later failure recorded without one keeps it; a retry
// recorded without one has none.
func testRetriesKeepEnvelope(t *testing.T, s store.Store, rr store.RetryRecorder) {
	t0 := now()
	k := key("order", "k-env")
	env := hostileEnvelope(t0)
	r1 := newRetry("r1", k.SagaType, k.Key, 1, t0)
	r1.Envelope = &env
	recordRetry(t, rr, r1)
	r2 := newRetry("r2", k.SagaType, k.Key, 1, t0.Add(time.Second))
	env2 := envelope("m-r2", t0)
	r2.Envelope = &env2
	commit(t, s, &store.Changes{RecordRetries: []store.Retry{r2}})
	recordRetry(t, rr, newRetry("r3", k.SagaType, k.Key, 1, t0.Add(2*time.Second)))

	got := retriesOf(t, rr, k)
	if len(got) != 3 {
		t.Fatalf("got retries %v, want [r1 r2 r3]", retryIDs(got))
	}
	retryEnvelope(t, "Retries, r1 recorded alone", got[0], &env)
	retryEnvelope(t, "Retries, r2 recorded in a commit", got[1], &env2)
	retryEnvelope(t, "Retries, r3 recorded without an envelope", got[2], nil)
	page, err := rr.QueryRetries(t.Context(), &store.RetryQuery{SagaType: k.SagaType})
	if err != nil || len(page) != 3 {
		t.Fatalf("QueryRetries: got %v, %v; want [r1 r2 r3]", retryIDs(page), err)
	}
	retryEnvelope(t, "QueryRetries, r1", page[0], &env)

	again := newRetry("r1", k.SagaType, k.Key, 2, t0.Add(3*time.Second))
	recordRetry(t, rr, again)
	got = retriesOf(t, rr, k)
	retryEnvelope(t, "r1 after a failure recorded without an envelope", got[0], &env)
	if got[0].Attempts != 2 {
		t.Errorf("r1 after its second failure: got %d attempts, want 2", got[0].Attempts)
	}
}

// Once a retry has a RetryNowAt, a failure not before it is recorded even
// with fewer attempts (the copy an operator published counts afresh): its
// error and times replace the stored ones, the attempts stay the greater,
// the first failure, envelope and RetryNowAt are kept. A failure before
// the retry now still changes nothing.
func testRetriesAfterRetryNow(t *testing.T, s store.Store, rr store.RetryRecorder) {
	t0 := now()
	k := key("order", "k-now")
	env := envelope("m-r1", t0)
	stuck := newRetry("r1", k.SagaType, k.Key, 5, t0)
	stuck.Envelope = &env
	recordRetry(t, rr, stuck)

	marked := stuck
	marked.RetryNowAt = t0.Add(10 * time.Second)
	recordRetry(t, rr, marked)
	got := retriesOf(t, rr, k)
	if len(got) != 1 || !got[0].RetryNowAt.Equal(marked.RetryNowAt) {
		t.Fatalf("after the retry now: got %+v, want r1 with RetryNowAt %v", got, marked.RetryNowAt)
	}

	early := newRetry("r1", k.SagaType, k.Key, 1, t0.Add(5*time.Second))
	recordRetry(t, rr, early)
	checkRetry(t, "after a failure from before the retry now", retriesOf(t, rr, k)[0], stuck)

	copyFailed := newRetry("r1", k.SagaType, k.Key, 1, t0.Add(11*time.Second))
	copyFailed.Error = "the copy failed too"
	commit(t, s, &store.Changes{RecordRetries: []store.Retry{copyFailed}})
	got = retriesOf(t, rr, k)
	want := copyFailed
	want.Attempts, want.FirstFailedAt = 5, t0
	checkRetry(t, "after the copy failed at its first attempt", got[0], want)
	retryEnvelope(t, "after the copy failed", got[0], &env)
	if !got[0].RetryNowAt.Equal(marked.RetryNowAt) {
		t.Errorf("after the copy failed: RetryNowAt %v, want %v kept", got[0].RetryNowAt, marked.RetryNowAt)
	}
}

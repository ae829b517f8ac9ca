package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// The FlowQueueWaiting cases check the refusals an admitting receive
// records: LimitUse.Waiting and store.AdmissionWaiter.

func init() {
	featureCases = append(featureCases,
		featureCase{"FlowQueueWaitingCounted", needAdmit, testFlowQueueWaitingCounted},
		featureCase{"FlowQueueWaitingStaleAfterLease", needAdmit, testFlowQueueWaitingStaleAfterLease},
	)
}

// shortWait is how long a case waits to see that nothing is admitted.
const shortWait = 300 * time.Millisecond

// useOf returns LimitUses' entry of k (the zero LimitUse with k when it
// lists none).
func useOf(t *testing.T, l store.Limiter, k store.LimitKey) store.LimitUse {
	t.Helper()
	inFlight(t, l, k) // checks the order and the signs
	uses, err := l.LimitUses(t.Context())
	if err != nil {
		t.Fatalf("limit uses: got error %v, want nil", err)
	}
	for _, u := range uses {
		if u.LimitKey == k {
			return u
		}
	}
	return store.LimitUse{LimitKey: k}
}

// waitsOf returns AdmissionWaitsOf(key) as "message-id@limit" strings.
func waitsOf(t *testing.T, s store.Store, key string) []string {
	t.Helper()
	w, ok := s.(store.AdmissionWaiter)
	if !ok {
		t.Fatalf("%T is a store.AdmittingQueue but not a store.AdmissionWaiter: it cannot say what a saga's message waits for", s)
	}
	ws, err := w.AdmissionWaitsOf(t.Context(), key)
	if err != nil {
		t.Fatalf("admission waits of %q: got error %v, want nil", key, err)
	}
	var out []string
	for _, x := range ws {
		if x.VisibleAt.IsZero() || x.MessageType == "" {
			t.Errorf("admission waits of %q: %+v lacks its type or visible time", key, x)
		}
		out = append(out, x.MessageID+"@"+x.Limit.Name+"/"+x.Limit.Key)
	}
	return out
}

// testFlowQueueWaitingCounted fills a cap, checks that the messages
// refused (and the one behind a refused message of its key) count as
// waiting on the counter, once however many receives refuse them, that a
// counter with waiting messages and nothing else is listed, and that the
// count falls to 0 once they are admitted.
func testFlowQueueWaitingCounted(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	api := lk("api", "")
	lim := limits(store.Limit{Name: "api", Concurrency: 2})
	hostile := "k-3 <script>alert(1)</script>"
	publish(t, q, limited("m-1", "k-1", "api"), limited("m-2", "k-2", "api"), limited("m-3", hostile, "api"), limited("m-4", hostile, ""))
	first := receiveAdmitted(t, q, lim, 10, promptWait)
	wantIDs(t, "cap 2 over 4", first, 1, "m-1", "m-2")
	if u := useOf(t, q, api); u.InFlight != 2 || u.Waiting != 2 {
		t.Fatalf("after a refusal: got %+v, want 2 in flight and 2 waiting (m-3 refused, m-4 behind it)", u)
	}
	if got, want := waitsOf(t, s, hostile), []string{"m-3@api/", "m-4@api/"}; !slices.Equal(got, want) {
		t.Errorf("admission waits of %q: got %v, want %v", hostile, got, want)
	}
	if got := waitsOf(t, s, "k-1"); len(got) != 0 {
		t.Errorf("admission waits of an admitted saga: got %v, want none", got)
	}
	expectNoAdmission(t, q, lim, "at the cap", shortWait)
	if u := useOf(t, q, api); u.Waiting != 2 {
		t.Fatalf("refused again: got %+v, want still 2 waiting", u)
	}
	ackAll(t, q, first)
	if u := useOf(t, q, api); u.InFlight != 0 || u.Waiting != 2 {
		t.Fatalf("released, not received yet: got %+v, want listed with 0 in flight and 2 waiting", u)
	}
	wantIDs(t, "released", receiveAdmitted(t, q, lim, 10, promptWait), 1, "m-3", "m-4")
	if u := useOf(t, q, api); u.Waiting != 0 {
		t.Fatalf("after admission: got %+v, want 0 waiting", u)
	}
	if got := waitsOf(t, s, hostile); len(got) != 0 {
		t.Errorf("admission waits once admitted: got %v, want none", got)
	}
}

// testFlowQueueWaitingStaleAfterLease checks that a refused message
// leased by a plain Receive, and given back, no longer counts: its
// refusal is stale once its attempt moved.
func testFlowQueueWaitingStaleAfterLease(t *testing.T, s store.Store, f Features) {
	q := admittingOf(t, s)
	api := lk("api", "")
	publish(t, q, limited("m-1", "k-1", "api"), limited("m-2", "k-2", "api"))
	wantIDs(t, "cap 1 over 2", receiveAdmitted(t, q, apiCap1, 10, promptWait), 1, "m-1")
	if u := useOf(t, q, api); u.Waiting != 1 {
		t.Fatalf("after a refusal: got %+v, want 1 waiting", u)
	}
	ds := receive(t, q, 1, promptWait)
	wantIDs(t, "a plain receive", ds, 1, "m-2")
	if u := useOf(t, q, api); u.Waiting != 0 {
		t.Fatalf("leased by a plain receive: got %+v, want 0 waiting", u)
	}
	if err := q.Nack(t.Context(), ds[0], 0); err != nil {
		t.Fatalf("nack %s: %v", ds[0].Envelope.ID, err)
	}
	if u := useOf(t, q, api); u.Waiting != 0 {
		t.Fatalf("given back, visible again: got %+v, want 0 waiting (its refusal is of an earlier attempt)", u)
	}
	if got := waitsOf(t, s, "k-2"); len(got) != 0 {
		t.Errorf("admission waits after a lease: got %v, want none", got)
	}
}

package admin_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store"
)

// recordStuckPayment records a retry of a payment to the order key, as
// the engine does when its delivery fails, with the message's envelope
// (none when withEnvelope is false, as a retry recorded before the stores
// kept it) and a next attempt an hour away.
func recordStuckPayment(t *testing.T, b *bundle, key string, withEnvelope bool) store.Retry {
	t.Helper()
	env, err := b.e.NewEnvelope("pay-"+key, orders.PaymentReceived{OrderID: key, Amount: 5})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC().Truncate(time.Microsecond)
	r := store.Retry{ID: env.DedupID(), SagaType: "order", Key: key, MessageID: env.ID, MessageType: env.Type, Attempts: 3,
		Error: "charge card: <script>alert(1)</script>", FirstFailedAt: now.Add(-time.Minute), LastFailedAt: now, NextAttemptAt: now.Add(time.Hour)}
	if withEnvelope {
		r.Envelope = &env
	}
	if err := b.st.RecordRetry(t.Context(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// waitShipped waits for the order key to apply its payment, then returns
// the actor of its last journal entry.
func waitShipped(t *testing.T, b *bundle, key string) string {
	t.Helper()
	eventually(t, "order "+key+" to apply its payment", func() bool {
		in, err := loadInstance(b, key)
		return err == nil && in != nil && in.State == "Shipped"
	})
	journal, err := b.st.Journal(t.Context(), store.Key{SagaType: "order", Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return journal[len(journal)-1].Actor
}

// POST /api/sagas/{type}/{key}/retries/{id}/retry publishes the stored
// message again now, under its ID, naming the actor in the journal, and
// marks the retry; a retry without an envelope is refused with 409, an
// unknown one with 404.
func TestAPIRetryNow(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	stuck := recordStuckPayment(t, b, "o-1", true)
	old := recordStuckPayment(t, b, "o-2", false)

	path := "/api/sagas/order/o-1/retries/" + url.PathEscape(stuck.ID) + "/retry"
	code, body := b.do(t, http.MethodPost, path, "", admin.ActorHeader, "alice <script>")
	if code != http.StatusAccepted {
		t.Fatalf("POST %s: %d %s; want 202", path, code, body)
	}
	var acc admin.Accepted
	if err := json.Unmarshal([]byte(body), &acc); err != nil || acc.ID != stuck.MessageID || acc.Type != stuck.MessageType {
		t.Errorf("POST %s: answer %s (%v); want the message ID %q and type %q", path, body, err, stuck.MessageID, stuck.MessageType)
	}
	if actor := waitShipped(t, b, "o-1"); actor != "api (loopback): alice <script>" {
		t.Errorf("journal entry of the retried payment: actor %q, want %q", actor, "api (loopback): alice <script>")
	}
	rs, err := b.st.Retries(t.Context(), store.Key{SagaType: "order", Key: "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs {
		if r.ID == stuck.ID && r.RetryNowAt.IsZero() {
			t.Errorf("retry %q after retry now: RetryNowAt is zero, want the time of the retry now", r.ID)
		}
	}

	oldPath := "/api/sagas/order/o-2/retries/" + url.PathEscape(old.ID) + "/retry"
	if code, body := b.do(t, http.MethodPost, oldPath, ""); code != http.StatusConflict || !strings.Contains(body, "cannot be retried now") {
		t.Errorf("POST %s (no envelope): %d %s; want 409 saying it cannot be retried now", oldPath, code, body)
	}
	if code, body := b.do(t, http.MethodPost, "/api/sagas/order/o-3/retries/nope/retry", ""); code != http.StatusNotFound || !strings.Contains(body, "is being retried") {
		t.Errorf("POST retry of an unknown message: %d %s; want 404", code, body)
	}
	if in, err := loadInstance(b, "o-2"); err != nil || in == nil || in.State == "Shipped" {
		t.Errorf("o-2, whose retry has no envelope: %+v, %v; want it not shipped", in, err)
	}
}

// A read-only admin server refuses retry now, single and batch.
func TestAPIRetryNowReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{ReadOnly: true})
	for _, path := range []string{"/api/sagas/order/o-1/retries/pay-o-1/retry", "/api/retries/retry"} {
		if code, body := b.do(t, http.MethodPost, path, `{"digest":"x"}`); code != http.StatusForbidden {
			t.Errorf("POST %s on a read-only server: %d %s; want 403", path, code, body)
		}
	}
}

type retrySelection struct {
	Count   int `json:"count"`
	Retries []struct {
		ID       string `json:"id"`
		Attempts int    `json:"attempts"`
	} `json:"retries"`
	Digest      string `json:"digest"`
	Unretryable int    `json:"unretryable"`
}

// GET /api/retries/select counts the retrying messages a filter selects;
// POST /api/retries/retry retries exactly that set, refusing with 409 once
// it changed, and skips the messages without an envelope.
func TestAPIRetryNowBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	pay := paymentType(t, b)
	recordStuckPayment(t, b, "o-1", true)
	recordStuckPayment(t, b, "o-2", false)
	filter := "?saga_type=order&message_type=" + url.QueryEscape(pay)
	var sel retrySelection
	b.getJSON(t, "/api/retries/select"+filter, &sel)
	if sel.Count != 2 || len(sel.Retries) != 2 || sel.Digest == "" || sel.Unretryable != 1 {
		t.Fatalf("select: %+v; want 2 retries, one unretryable, and a digest", sel)
	}
	var none retrySelection
	b.getJSON(t, "/api/retries/select?message_type=other.Type", &none)
	if none.Count != 0 {
		t.Errorf("select of another message type: %+v; want none", none)
	}

	recordStuckPayment(t, b, "o-3", true) // the set changes after the count
	code, body := b.do(t, http.MethodPost, "/api/retries/retry"+filter, `{"digest":"`+sel.Digest+`"}`, admin.ActorHeader, "bob")
	if code != http.StatusConflict || !strings.Contains(body, "count again") {
		t.Fatalf("POST retry with the digest of a set that changed: %d %s; want 409", code, body)
	}
	if in, err := loadInstance(b, "o-1"); err != nil || in == nil || in.State == "Shipped" {
		t.Fatalf("o-1 after a refused batch: %+v, %v; want it not retried", in, err)
	}

	b.getJSON(t, "/api/retries/select"+filter, &sel)
	if sel.Count != 3 {
		t.Fatalf("select after o-3 failed: %+v; want 3", sel)
	}
	code, body = b.do(t, http.MethodPost, "/api/retries/retry"+filter, `{"digest":"`+sel.Digest+`"}`, admin.ActorHeader, "bob")
	var res admin.RetryNowResult
	if code != http.StatusOK || json.Unmarshal([]byte(body), &res) != nil || res.Done != 2 || len(res.Skipped) != 1 || res.Skipped[0] != "pay-o-2" {
		t.Fatalf("POST retry: %d %s; want 200, 2 done, pay-o-2 skipped", code, body)
	}
	for _, k := range []string{"o-1", "o-3"} {
		if actor := waitShipped(t, b, k); actor != "api (loopback): bob" {
			t.Errorf("journal entry of %s's retried payment: actor %q, want %q", k, actor, "api (loopback): bob")
		}
	}

	for _, bad := range []string{"?status=active", "?saga_type=" + url.QueryEscape("a\x00b")} {
		if code, body := b.do(t, http.MethodGet, "/api/retries/select"+bad, ""); code != http.StatusBadRequest {
			t.Errorf("GET select%s: %d %s; want 400 naming the filter", bad, code, body)
		}
	}
	if code, body := b.do(t, http.MethodPost, "/api/retries/retry"+filter, `{}`); code != http.StatusBadRequest || !strings.Contains(body, "digest") {
		t.Errorf("POST retry without a digest: %d %s; want 400", code, body)
	}
}

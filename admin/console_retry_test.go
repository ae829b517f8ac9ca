package admin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
)

// recordRetry writes a retry of the saga order/key, as the engine does
// when a delivery fails, with a hostile error chain.
func recordRetry(t *testing.T, b *bundle, id, key string) store.Retry {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Microsecond)
	r := store.Retry{ID: id, SagaType: "order", Key: key, MessageID: id, MessageType: "orders.PaymentReceived", Attempts: 3,
		Error:         "charge card: gateway said <script>alert(1)</script> \x00 \xff\nwrapped: connection reset",
		FirstFailedAt: now.Add(-time.Minute), LastFailedAt: now, NextAttemptAt: now.Add(3 * time.Minute)}
	if err := b.st.RecordRetry(t.Context(), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// The Why panel lists a saga's retrying messages, escaped, and its
// verdict says it is retrying.
func TestConsoleWhyRetrying(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	recordRetry(t, b, "pay-o-1", "o-1")
	panel := whyPanel(t, newBrowser(t, b), "/instances/order/o-1")
	for _, want := range []string{
		"retrying: orders.PaymentReceived failed 3 time(s); next attempt in ",
		`id="why-retries"`, "pay-o-1", "attempt <b>3</b>",
		`<pre class="error-chain scroll">charge card: gateway said &lt;script&gt;alert(1)&lt;/script&gt; \x00 ` + "\uFFFD\nwrapped: connection reset</pre>",
	} {
		if !strings.Contains(panel, want) {
			t.Errorf("Why panel of o-1 lacks %q:\n%s", want, panel)
		}
	}
	if strings.Contains(panel, "<script>alert") {
		t.Errorf("Why panel renders the error's markup unescaped:\n%s", panel)
	}
	if other := whyPanel(t, newBrowser(t, b), "/instances/order/o-2"); strings.Contains(other, "retrying") || strings.Contains(other, "pay-o-1") {
		t.Errorf("Why panel of o-2 shows o-1's retry:\n%s", other)
	}
}

// GET /api/sagas/{type}/{key}/retries lists the saga's retries (also
// when no saga exists yet: its first message may be the one failing), and
// refuses a bad key.
func TestAPISagaRetries(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	want := recordRetry(t, b, "pay-o-1", "o-1")
	recordRetry(t, b, "first-o-new", "o-new")
	var got admin.RetryList
	b.getJSON(t, "/api/sagas/order/o-1/retries", &got)
	if len(got.Retries) != 1 {
		t.Fatalf("retries of o-1: got %+v, want one", got.Retries)
	}
	r := got.Retries[0]
	if r.ID != want.ID || r.Attempts != 3 || r.Error != store.RetryText(want.Error) || !r.NextAttemptAt.Equal(want.NextAttemptAt) || !r.FirstFailedAt.Equal(want.FirstFailedAt) {
		t.Errorf("retry of o-1: got %+v, want %+v with the error made storable", r, want)
	}
	b.getJSON(t, "/api/sagas/order/o-new/retries", &got)
	if len(got.Retries) != 1 || got.Retries[0].ID != "first-o-new" {
		t.Errorf("retries of o-new, which has no saga yet: got %+v, want first-o-new", got.Retries)
	}
	if code, body := b.do(t, http.MethodGet, "/api/sagas/order/o-2/retries", ""); code != http.StatusOK || !strings.Contains(body, `"retries":[]`) {
		t.Errorf("retries of o-2: %d %s, want 200 with an empty list", code, body)
	}
	if code, body := b.do(t, http.MethodGet, "/api/sagas/order/"+url.PathEscape("bad\x01key")+"/retries", ""); code != http.StatusBadRequest || !strings.Contains(body, "not a valid key") {
		t.Errorf("retries of a bad key: %d %s, want 400 naming the key", code, body)
	}
}

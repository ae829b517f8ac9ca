package admin_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/saga"
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

// The stuck view says why each row is listed: a retrying message, a
// request past its deadline, an overdue timer, or how long the saga has
// had no event in its state. The engine is stopped first, so nothing fires
// the overdue timers.
func TestConsoleStuckViewSaysWhy(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	ctx := t.Context()
	if err := b.e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	recordRetry(t, b, "pay-o-1", "o-1")
	now := time.Now().UTC()
	timer := func(key, name string) store.Timer {
		return store.Timer{SagaType: "order", Key: key, Name: name, DueAt: now.Add(-90 * time.Second),
			Envelope: idem.Envelope{ID: "timer-" + key, Type: "idem.Timeout@order", Body: []byte(`{}`)}}
	}
	uow, err := b.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{Timers: []store.Timer{timer("o-2", "reminder"), timer("o-3", saga.RequestTimerPrefix+"authorize")}}); err != nil {
		t.Fatal(err)
	}
	code, page := newBrowser(t, b).get("/instances?stuck=on&type=order")
	if code != http.StatusOK {
		t.Fatalf("stuck view: status %d", code)
	}
	if !strings.Contains(page, "<th>Why listed</th>") {
		t.Fatalf("stuck view has no Why listed column:\n%s", page)
	}
	rows := map[string]string{}
	for _, tr := range strings.Split(page, "<tr>")[1:] {
		for _, k := range []string{"o-1", "o-2", "o-3", "x-9"} {
			if strings.Contains(tr, "/instances/order/"+k+`"`) {
				rows[k] = tr
			}
		}
	}
	for k, want := range map[string][2]string{
		"o-1": {"retrying: orders.PaymentReceived failed 3 time(s)", "next attempt in "},
		"o-2": {"a timer is overdue by ", " (reminder)</td>"},
		"o-3": {"a request is past its deadline by ", " (authorize)</td>"},
		"x-9": {"no event for ", " in state &#34;AwaitingPayment&#34;</td>"},
	} {
		if !strings.Contains(rows[k], `<td class="why-listed">`+want[0]) || !strings.Contains(rows[k], want[1]) {
			t.Errorf("stuck view row %s: want why-listed %q … %q, got\n%s", k, want[0], want[1], rows[k])
		}
	}
	if code, page := newBrowser(t, b).get("/instances?type=order"); code != http.StatusOK || strings.Contains(page, "Why listed") {
		t.Errorf("the plain instance list (status %d) shows the Why listed column", code)
	}
}

package admin_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
)

// The Retrying page lists every retrying message, escaped, with a Retry
// now button where its envelope is kept and a note where it is not; retry
// all matching asks with the count, then retries exactly that set, and a
// confirmation whose set changed is refused with 409, retrying nothing.
// Cross-origin and read-only POSTs are refused.
func TestConsoleRetryNowBatch(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	recordStuckPayment(t, b, "o-1", true)
	recordStuckPayment(t, b, "o-2", false)
	br := newBrowser(t, b)
	code, page := br.get("/retries")
	if code != http.StatusOK {
		t.Fatalf("GET /retries: %d", code)
	}
	for _, want := range []string{`aria-current="page">Retrying</a>`, `data-live="3"`, "pay-o-1", "pay-o-2", "charge card: &lt;script&gt;alert(1)&lt;/script&gt;",
		`data-action="retry-now"`, "cannot be retried now", `name="id" value="pay-o-1"`} {
		if !strings.Contains(page, want) {
			t.Errorf("/retries lacks %q", want)
		}
	}
	if strings.Contains(page, "<script>alert") || strings.Contains(page, `name="id" value="pay-o-2"`) {
		t.Errorf("/retries renders markup unescaped, or offers pay-o-2 (no envelope) for selection")
	}
	if _, panel := br.get("/instances/order/o-1"); !strings.Contains(panel, `data-action="retry-now"`) {
		t.Errorf("the Why panel of o-1 has no Retry now button")
	}

	resp, _ := br.post("/retries/retry", url.Values{"saga_type": {"order"}})
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /retries/retry without confirm: %d, want 303 to the question", resp.StatusCode)
	}
	code, ask := br.get(resp.Header.Get("Location"))
	digest := regexp.MustCompile(`name="digest" value="([0-9a-f]+)"`).FindStringSubmatch(ask)
	if code != http.StatusOK || !strings.Contains(ask, "Retry 2 message(s) now?") || !strings.Contains(ask, "1 of them were recorded before") || digest == nil {
		t.Fatalf("question: %d, want 2 messages counted, one skipped, and a digest:\n%s", code, ask)
	}
	recordStuckPayment(t, b, "o-3", true)
	resp, body := br.post("/retries/retry", url.Values{"saga_type": {"order"}, "digest": {digest[1]}, "confirm": {"yes"}})
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "count again") {
		t.Fatalf("confirm after the set changed: %d, want 409 asking to count again", resp.StatusCode)
	}
	if in, err := loadInstance(b, "o-1"); err != nil || in.State == "Shipped" {
		t.Fatalf("o-1 after a refused confirmation: %+v, %v; want it not retried", in, err)
	}
	if resp, _ := br.post("/retries/retry", url.Values{"saga_type": {"order"}, "digest": {digest[1]}, "confirm": {"yes"}}, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin confirmation: %d, want 403", resp.StatusCode)
	}

	if resp, body := br.post("/retries/retry", url.Values{"selected": {"yes"}}); resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "No message is ticked") {
		t.Errorf("Retry selected with nothing ticked: %d, want 400 saying so", resp.StatusCode)
	}
	_, ask = br.get("/retries/retry?saga_type=order&id=pay-o-1&id=pay-o-3")
	digest = regexp.MustCompile(`name="digest" value="([0-9a-f]+)"`).FindStringSubmatch(ask)
	if digest == nil || !strings.Contains(ask, "Retry 2 message(s) now?") {
		t.Fatalf("question about the selection: want 2 messages and a digest:\n%s", ask)
	}
	resp, _ = br.post("/retries/retry", url.Values{"saga_type": {"order"}, "id": {"pay-o-1", "pay-o-3"}, "digest": {digest[1]}, "confirm": {"yes"}})
	if resp.StatusCode != http.StatusSeeOther || !strings.Contains(resp.Header.Get("Location"), "n=2") {
		t.Fatalf("confirm the selection: %d to %q, want 303 with 2 done", resp.StatusCode, resp.Header.Get("Location"))
	}
	for _, k := range []string{"o-1", "o-3"} {
		if actor := waitShipped(t, b, k); !strings.HasPrefix(actor, "console") {
			t.Errorf("journal of %s's retried payment: actor %q, want the console", k, actor)
		}
	}
	if in, err := loadInstance(b, "o-2"); err != nil || in.State == "Shipped" {
		t.Errorf("o-2, not selected and without an envelope: %+v, %v; want it not retried", in, err)
	}
}

// A read-only console shows no Retry now control and refuses its pages.
func TestConsoleRetryNowReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{ReadOnly: true})
	seed(t, b)
	recordStuckPayment(t, b, "o-1", true)
	br := newBrowser(t, b)
	if _, page := br.get("/retries"); strings.Contains(page, "retry-now") || strings.Contains(page, "Retry all") || !strings.Contains(page, "pay-o-1") {
		t.Errorf("read-only /retries: want pay-o-1 listed without controls")
	}
	if _, panel := br.get("/instances/order/o-1"); strings.Contains(panel, `data-action="retry-now"`) {
		t.Errorf("read-only Why panel offers Retry now")
	}
	for _, path := range []string{"/retries/retry-now?type=order&key=o-1&id=pay-o-1", "/retries/retry?saga_type=order"} {
		if code, _ := br.get(path); code != http.StatusForbidden {
			t.Errorf("read-only GET %s: %d, want 403", path, code)
		}
	}
	if resp, _ := br.post("/retries/retry-now", url.Values{"type": {"order"}, "key": {"o-1"}, "id": {"pay-o-1"}, "confirm": {"yes"}}); resp.StatusCode != http.StatusForbidden {
		t.Errorf("read-only POST /retries/retry-now: %d, want 403", resp.StatusCode)
	}
}

// Retry now of one message asks first, naming its ID, type, attempts and
// last error (escaped), then publishes it again and goes back; a message
// without an envelope is refused with 409 before anything is asked.
func TestConsoleRetryNowOne(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	r := recordStuckPayment(t, b, "o-1", true)
	recordStuckPayment(t, b, "o-2", false)
	br := newBrowser(t, b)
	form := url.Values{"type": {"order"}, "key": {"o-1"}, "id": {r.ID}, "back": {"/instances/order/o-1"}}
	resp, _ := br.post("/retries/retry-now", form)
	if resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("POST /retries/retry-now without confirm: %d, want 303 to the question", resp.StatusCode)
	}
	code, ask := br.get(resp.Header.Get("Location"))
	for _, want := range []string{"Retry this message now?", `id="confirm-message-id">pay-o-1<`, r.MessageType, `id="confirm-attempts">3<`, "charge card: &lt;script&gt;"} {
		if code != http.StatusOK || !strings.Contains(ask, want) {
			t.Errorf("question: %d, lacks %q", code, want)
		}
	}
	if in, err := loadInstance(b, "o-1"); err != nil || in.State == "Shipped" {
		t.Fatalf("o-1 before the confirmation: %+v, %v; want it not retried", in, err)
	}
	form.Set("confirm", "yes")
	resp, _ = br.post("/retries/retry-now", form)
	if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.HasPrefix(loc, "/instances/order/o-1?") {
		t.Fatalf("confirm: %d to %q, want 303 back to the instance", resp.StatusCode, loc)
	}
	if _, page := br.get(resp.Header.Get("Location")); !strings.Contains(page, "1 message published again now") || strings.Contains(page, "event sent") {
		t.Errorf("after retry now the instance page does not say the message was published again:\n%.2000s", page)
	}
	if actor := waitShipped(t, b, "o-1"); !strings.HasPrefix(actor, "console") {
		t.Errorf("journal of o-1's retried payment: actor %q, want the console", actor)
	}
	if code, page := br.get("/retries/retry-now?type=order&key=o-2&id=pay-o-2"); code != http.StatusConflict || !strings.Contains(page, "cannot be retried now") {
		t.Errorf("question about a retry without an envelope: %d, want 409 saying it cannot be retried now", code)
	}
}

// The Retrying page pages by the store's cursor (50 a page) and filters
// by saga type; a cursor it did not make is refused with 400.
func TestConsoleRetriesPaged(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	base := time.Now().UTC().Truncate(time.Microsecond)
	for i := range 51 {
		at := base.Add(time.Duration(i) * time.Second)
		r := store.Retry{ID: fmt.Sprintf("m-%03d", i), SagaType: "order", Key: fmt.Sprintf("k-%03d", i), MessageID: fmt.Sprintf("m-%03d", i),
			MessageType: "orders.PaymentReceived", Attempts: 1, Error: "boom", FirstFailedAt: at, LastFailedAt: at, NextAttemptAt: at.Add(time.Hour)}
		if err := b.st.RecordRetry(t.Context(), &r); err != nil {
			t.Fatal(err)
		}
	}
	br := newBrowser(t, b)
	rows := regexp.MustCompile(`data-retry="(m-\d+)"`)
	_, page := br.get("/retries?saga_type=order")
	first := rows.FindAllStringSubmatch(page, -1)
	next := regexp.MustCompile(`href="(/retries\?[^"]+)">Next page`).FindStringSubmatch(page)
	if len(first) != 50 || first[0][1] != "m-000" || next == nil {
		t.Fatalf("first page: %d rows from %v, next %v; want 50 from m-000 and a next page", len(first), first[:min(1, len(first))], next)
	}
	_, page = br.get(strings.ReplaceAll(next[1], "&amp;", "&"))
	if second := rows.FindAllStringSubmatch(page, -1); len(second) != 1 || second[0][1] != "m-050" {
		t.Errorf("second page: %v; want m-050 alone", second)
	}
	if _, page = br.get("/retries?saga_type=other"); rows.MatchString(page) {
		t.Errorf("/retries of another saga type lists order's retries")
	}
	if code, _ := br.get("/retries?after_at=yesterday"); code != http.StatusBadRequest {
		t.Errorf("a cursor the page did not make: %d, want 400", code)
	}
}

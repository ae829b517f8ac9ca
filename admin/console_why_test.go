package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// whyPanel returns the Why panel of the instance page at path.
func whyPanel(t *testing.T, br *browser, path string) string {
	t.Helper()
	code, page := br.get(path)
	if code != http.StatusOK {
		t.Fatalf("GET %s: status %d, want 200", path, code)
	}
	start := strings.Index(page, `id="why"`)
	end := strings.Index(page, `id="journal"`)
	if start < 0 || end < start {
		t.Fatalf("GET %s: no Why panel above the journal", path)
	}
	return page[start:end]
}

// The Why panel says what a saga waits for, from its machine, its timers,
// requests and dead letters, with a one-line verdict. The engine is
// stopped before the overdue timer is written, so nothing fires it.
func TestConsoleInstanceWhy(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	finishedTimer(t, b)
	ctx := context.Background()
	if err := b.e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	late, err := b.e.NewEnvelope("late-why", struct{ X string }{"<script>"})
	if err != nil {
		t.Fatal(err)
	}
	hostile := "apply: <script>alert(1)</script> \x00 \xff"
	uow, err := b.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{
		Inserts: []*store.Instance{{SagaType: "ghost", Key: "g-1", State: "Lost", Data: []byte(`{}`), SchemaVersion: 1, Version: 1, CreatedAt: now, UpdatedAt: now}},
		Timers: []store.Timer{
			{SagaType: "order", Key: "o-1", Name: "reminder", DueAt: now.Add(-90 * time.Second), Envelope: late},
			{SagaType: "order", Key: "o-2", Name: saga.RequestTimerPrefix + "authorize", DueAt: now.Add(time.Hour), Envelope: idem.Envelope{ID: "req-timer-o-2", Type: "idem.Timeout[authorize]@order", Body: []byte(`{}`)}},
		},
		DeadLetters: []store.DeadLetter{{
			ID: "dl-o-2", Envelope: idem.Envelope{ID: "dl-o-2", Type: "orders.PaymentReceived", Body: []byte(`{}`)}, Reason: "handler_failed", Error: hostile,
			SagaType: "order", Key: "o-2", Attempts: 7, FirstFailedAt: now.Add(-time.Hour), LastFailedAt: now.Add(-time.Minute),
		}},
	}); err != nil {
		t.Fatal(err)
	}
	br := newBrowser(t, b)

	// o-1: waits for PaymentReceived or PaymentOverdue; a timer is overdue.
	why := whyPanel(t, br, "/instances/order/o-1")
	for _, want := range []string{"a timer is overdue by 1m 3", "PaymentReceived", "PaymentOverdue", "Shipped", "Cancelled", "reminder"} {
		if !strings.Contains(why, want) {
			t.Errorf("Why panel of o-1 lacks %q:\n%s", want, why)
		}
	}
	// o-2: a pending request and a dead letter, which the verdict names.
	why = whyPanel(t, br, "/instances/order/o-2")
	for _, want := range []string{"a message is dead-lettered (handler_failed)", "authorize", saga.RequestID("req-timer-o-2"),
		"&lt;script&gt;alert(1)&lt;/script&gt;", ">7<", `href="/dead-letters/dl-o-2"`, "PaymentReceived"} {
		if !strings.Contains(why, want) {
			t.Errorf("Why panel of o-2 lacks %q:\n%s", want, why)
		}
	}
	if strings.Contains(why, "<script>") {
		t.Errorf("Why panel of o-2 shows the error text unescaped:\n%s", why)
	}
	// o-3 is finished, though a timer is left on it.
	if why = whyPanel(t, br, "/instances/order/o-3"); !strings.Contains(why, "finished") || strings.Contains(why, "waiting for") {
		t.Errorf("Why panel of the finished o-3: want the verdict finished:\n%s", why)
	}
	// A saga whose machine this process does not register.
	if why = whyPanel(t, br, "/instances/ghost/g-1"); !strings.Contains(why, "machine not registered here") {
		t.Errorf("Why panel of ghost/g-1: want %q:\n%s", "machine not registered here", why)
	}
	// A hostile key: the panel renders, escaped.
	if why = whyPanel(t, br, "/instances/order/"+url.PathEscape(hostileKey)); !strings.Contains(why, "waiting for one of") {
		t.Errorf("Why panel of the hostile key: want a verdict:\n%s", why)
	}
}

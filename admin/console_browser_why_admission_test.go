package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// hostileTenantKey is the tenant, and so the limit's key, of the
// admission tests: markup that must show as text.
const hostileTenantKey = `<img src=x onerror=alert("tenant")>`

// admissionRig is an engine on the console's store with the payment saga
// and a limit, parser-api, of 1 at once per tenant over the payment's
// charges and files.Parse, whose handler holds each message until open
// is called; and an admin server over it. Two consumers: with one (the
// default on SQLite), the consumer waits for the held files.Parse and
// no receive looks at the charge.
func admissionRig(t *testing.T) (*bundle, func()) {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := openConsoleStore(t, quiet)
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: quiet, BatchSize: 1, Lanes: 4, Consumers: 2, LimitsInterval: 20 * time.Millisecond,
		Limits: []idem.Limit{{Name: "parser-api", MessageTypes: []string{saga.MessageType(paymentCharge{}), "files.Parse"}, Concurrency: 1,
			Key: func(env *idem.Envelope) string { return env.Headers["tenant"] }}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(paymentMachine(0)); err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(gate) }) }
	if err := e.Handle("files.Parse", func(ctx context.Context, _ idem.Envelope) error {
		select {
		case <-gate:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { open(); _ = e.Stop(context.Background()); _ = st.Close() })
	h, err := admin.New(e, st, &admin.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &bundle{e: e, st: st, srv: srv}, open
}

// waitingCharge starts payment pay-1, fills the tenant's slot with a
// files.Parse held by its handler, and sends pay-1 a charge of the same
// tenant, returned once the store records that it waits for admission.
func waitingCharge(t *testing.T, b *bundle) {
	t.Helper()
	ctx := context.Background()
	env, err := b.e.NewEnvelope("start-pay-1", paymentStarted{ID: "pay-1", Amount: 42})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.e.PublishAndWait(ctx, env); err != nil {
		t.Fatalf("start pay-1: %v", err)
	}
	tenant := map[string]string{"tenant": hostileTenantKey}
	if err := b.e.Publish(ctx, idem.Envelope{ID: "parse-1", Type: "files.Parse", CorrelationID: "file-1", Headers: tenant}); err != nil {
		t.Fatal(err)
	}
	lim := b.st.(store.Limiter)
	eventually(t, "the tenant's slot taken", func() bool {
		uses, err := lim.LimitUses(ctx)
		return err == nil && len(uses) == 1 && uses[0].InFlight == 1
	})
	if env, err = b.e.NewEnvelope("charge-pay-1", paymentCharge{ID: "pay-1"}); err != nil {
		t.Fatal(err)
	}
	env.Headers = tenant
	if err := b.e.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	aw := b.st.(store.AdmissionWaiter)
	eventually(t, "the charge recorded as waiting for admission", func() bool {
		ws, err := aw.AdmissionWaitsOf(ctx, "pay-1")
		return err == nil && len(ws) == 1
	})
}

// An instance page whose saga has a message waiting for admission says
// so in its verdict, naming the limit and its key (markup shown as text),
// and lists the message; once the slot is free the charge is handled and
// the page no longer says it.
func TestBrowserInstanceWaitingForAdmission(t *testing.T) {
	t.Parallel()
	b, open := admissionRig(t)
	waitingCharge(t, b)

	bctx, dialog := chrome(t)
	var verdict, waits string
	run(t, bctx, "instance page", chromedp.Navigate(b.srv.URL+"/instances/payment/pay-1"), chromedp.WaitVisible("#why-admission"),
		chromedp.Text("#why-verdict", &verdict), chromedp.Text("#why-admission", &waits))
	if want := `waiting for admission: limit "parser-api" (key "<img src=x onerror=alert(\"tenant\")>") is at its cap`; verdict != want {
		t.Errorf("verdict: got %q, want %q", verdict, want)
	}
	for _, want := range []string{"charge-pay-1", "parser-api", hostileTenantKey, "is at its cap"} {
		if !strings.Contains(waits, want) {
			t.Errorf("messages waiting for admission lack %q:\n%s", want, waits)
		}
	}
	if dialog.Load() {
		t.Error("a JavaScript dialog opened: the key's markup ran")
	}
	screenshot(t, bctx, "instance-waiting-for-admission")

	open()
	eventually(t, "the charge admitted (and retrying)", func() bool {
		rs, err := b.st.Retries(context.Background(), payKey)
		return err == nil && len(rs) == 1
	})
	run(t, bctx, "instance page again", chromedp.Navigate(b.srv.URL+"/instances/payment/pay-1"), chromedp.WaitVisible("#why-retries"),
		chromedp.Text("#why-verdict", &verdict))
	if strings.Contains(verdict, "admission") {
		t.Errorf("verdict once admitted: got %q, want no admission wait", verdict)
	}
}

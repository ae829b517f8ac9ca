package admin_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

type (
	payment        struct{ Amount int }
	paymentStarted struct {
		ID     string
		Amount int
	}
	paymentCharge struct{ ID string }
)

// paymentMachine starts a payment, then fails a charge with a transient
// error asking for a retry in an hour, and moves the payment to Charged
// once a charge succeeds: with fail 0 every charge fails (the charge stays
// retrying), else only the first fail charges do.
func paymentMachine(fail int32) *saga.Machine[payment] {
	m := saga.New[payment]("payment")
	awaiting, charged := m.State("AwaitingCharge"), m.State("Charged")
	started := saga.NewEvent[paymentStarted](m, func(e paymentStarted) string { return e.ID })
	charge := saga.NewEvent[paymentCharge](m, func(e paymentCharge) string { return e.ID })
	m.Initially(saga.When(started).Then(func(c *saga.Context[payment], e paymentStarted) error {
		c.Data.Amount = e.Amount
		return nil
	}).TransitionTo(awaiting))
	var calls atomic.Int32
	m.During(awaiting, saga.When(charge).Then(func(*saga.Context[payment], paymentCharge) error {
		if n := calls.Add(1); fail == 0 || n <= fail {
			return idem.RetryAfter(time.Hour, errors.New(`charge card: gateway said <script>alert("x")</script>`))
		}
		return nil
	}).TransitionTo(charged))
	return m
}

// payKey is the payment saga that retryingCharge starts.
var payKey = store.Key{SagaType: "payment", Key: "pay-1"}

// retryingCharge is the rig of the retrying tests: an engine with m that
// starts payment pay-1 and sends it a charge (charge-pay-1), returned once
// the charge's retry state is stored.
func retryingCharge(t *testing.T, m *saga.Machine[payment]) *bundle {
	t.Helper()
	b := setupWith(t, nil, 0, m)
	ctx := context.Background()
	env, err := b.e.NewEnvelope("start-pay-1", paymentStarted{ID: "pay-1", Amount: 42})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.e.PublishAndWait(ctx, env); err != nil {
		t.Fatalf("start pay-1: %v", err)
	}
	if env, err = b.e.NewEnvelope("charge-pay-1", paymentCharge{ID: "pay-1"}); err != nil {
		t.Fatal(err)
	}
	if err := b.e.Publish(ctx, env); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the charge's retry state", func() bool {
		rs, err := b.st.Retries(ctx, payKey)
		return err == nil && len(rs) == 1
	})
	return b
}

// An instance page shows a message the engine is retrying, with its last
// error as text, and the verdict says the saga is retrying.
func TestBrowserInstanceRetrying(t *testing.T) {
	t.Parallel()
	b := retryingCharge(t, paymentMachine(0))

	bctx, dialog := chrome(t)
	var verdict, retries string
	run(t, bctx, "instance page", chromedp.Navigate(b.srv.URL+"/instances/payment/pay-1"), chromedp.WaitVisible("#why-retries"),
		chromedp.Text("#why-verdict", &verdict), chromedp.Text("#why-retries", &retries))
	if !strings.HasPrefix(verdict, "retrying:") || !strings.Contains(verdict, "failed 1 time(s); next attempt in ") {
		t.Errorf("verdict: got %q, want retrying, 1 failure, a next attempt ahead", verdict)
	}
	for _, want := range []string{"charge-pay-1", "attempt 1", "from now", `charge card: gateway said <script>alert("x")</script>`} {
		if !strings.Contains(retries, want) {
			t.Errorf("retrying messages lack %q:\n%s", want, retries)
		}
	}
	if dialog.Load() {
		t.Error("a JavaScript dialog opened: the error's markup ran")
	}
	screenshot(t, bctx, "instance-retrying")
}

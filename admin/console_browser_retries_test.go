package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The operator sees a message retrying with an hour's backoff, presses
// Retry now, is asked with the message's ID, type, attempts and last
// error, confirms, and the saga moves on long before the hour is up; the
// journal names who retried it.
func TestBrowserRetryNow(t *testing.T) {
	t.Parallel()
	b := retryingCharge(t, paymentMachine(1))
	ctx, k := context.Background(), payKey
	if rs, _ := b.st.Retries(ctx, k); rs[0].Envelope == nil {
		t.Fatal("the engine recorded the charge's retry without its envelope: it cannot be retried now (the engine must set store.Retry.Envelope where it records a retry, lane.go noteRetry)")
	}

	bctx, dialog := chrome(t)
	var listed string
	run(t, bctx, "the Retrying page", chromedp.Navigate(b.srv.URL+"/retries"), chromedp.WaitVisible("#retries"), chromedp.Text("#retries", &listed))
	if !strings.Contains(listed, "charge-pay-1") {
		t.Errorf("the Retrying page lists %q; want the charge of pay-1", listed)
	}
	screenshot(t, bctx, "retries")
	var question, msgID, msgType, attempts, lastErr string
	run(t, bctx, "press Retry now", chromedp.Navigate(b.srv.URL+"/instances/payment/pay-1"), chromedp.WaitVisible("#why-retries"),
		click(`#why-retries button[data-action="retry-now"]`, chromedp.ByQuery), chromedp.WaitVisible("#confirm-retry-now"),
		chromedp.Text("h1", &question), chromedp.Text("#confirm-message-id", &msgID), chromedp.Text("#confirm-message-type", &msgType),
		chromedp.Text("#confirm-attempts", &attempts), chromedp.Text("#confirm-error", &lastErr))
	if question != "Retry this message now?" || msgID != "charge-pay-1" || !strings.Contains(msgType, "paymentCharge") || attempts != "1" ||
		!strings.HasSuffix(lastErr, `charge card: gateway said <script>alert("x")</script>`) {
		t.Errorf("question: %q, message %q of type %q, attempts %q, last error %q; want the charge's", question, msgID, msgType, attempts, lastErr)
	}
	if in, err := loadSaga(b, k); err != nil || in == nil || in.State != "AwaitingCharge" {
		t.Fatalf("before the confirmation: %+v, %v; want pay-1 still awaiting its charge", in, err)
	}
	screenshot(t, bctx, "retry-now-question")
	confirmed := time.Now()
	run(t, bctx, "confirm", click("#confirm-retry-yes", chromedp.ByID), chromedp.WaitVisible("#why"))
	eventually(t, "pay-1 to be charged by the copy", func() bool {
		in, err := loadSaga(b, k)
		return err == nil && in != nil && in.State == "Charged"
	})
	t.Logf("charged %v after the confirmation; the backoff was 1h", time.Since(confirmed).Round(time.Millisecond))
	eventually(t, "the charge's retry state to be cleared by the copy that applied", func() bool {
		rs, err := b.st.Retries(ctx, k)
		return err == nil && len(rs) == 0
	})
	journal, err := b.st.Journal(ctx, k)
	if err != nil {
		t.Fatal(err)
	}
	if last := journal[len(journal)-1]; last.ToState != "Charged" || last.Actor != "console (loopback)" {
		t.Errorf("last journal entry: state %q by %q; want Charged by the console", last.ToState, last.Actor)
	}
	var page string
	run(t, bctx, "instance page after the retry", chromedp.Navigate(b.srv.URL+"/instances/payment/pay-1"), chromedp.WaitVisible("#saga-state"),
		chromedp.Text("main", &page))
	if !strings.Contains(page, "by console (loopback)") || strings.Contains(page, "retrying:") {
		t.Errorf("the instance page does not name the console in the journal, or still says the saga is retrying:\n%s", page)
	}
	if dialog.Load() {
		t.Error("a JavaScript dialog opened: the error's markup ran")
	}
}

package admin_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// From the console, an operator sends an event to a saga (a form offering
// the events its state accepts; confirmed) and the saga applies it; then
// ends another saga with a reason (confirmed), which moves it to
// saga.Ended.
func TestBrowserActions(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	pay := paymentType(t, b)
	ctx, _ := chrome(t)
	base := b.srv.URL
	var text string

	run(t, ctx, "send form", chromedp.Navigate(base+"/instances/order/o-1"), chromedp.WaitVisible("#send-form"),
		chromedp.Evaluate(`[...document.querySelectorAll('#send-type optgroup[label="accepted now"] option')].map(o => o.value).join(",")`, &text))
	if !strings.Contains(text, pay) {
		t.Errorf("the send form's accepted events: %q; want %s", text, pay)
	}
	run(t, ctx, "send", chromedp.SetValue("#send-type", pay), chromedp.SetValue("#send-body", `{"OrderID":"o-1","Amount":7}`),
		click("#send-submit"), chromedp.WaitVisible("#confirm-action"), chromedp.Text("#confirm-body", &text))
	if !strings.Contains(text, `"Amount":7`) {
		t.Errorf("the question shows the body %q; want the one typed", text)
	}
	screenshot(t, ctx, "instance-send-confirm")
	if in, _ := loadInstance(b, "o-1"); in.State != "AwaitingPayment" {
		t.Fatalf("o-1 is %s before the send was confirmed", in.State)
	}
	run(t, ctx, "confirm send", click("#confirm-action-yes"), chromedp.WaitVisible(".flash"), chromedp.Text(".flash", &text))
	if !strings.Contains(text, "event sent") {
		t.Errorf("flash after the send: %q", text)
	}
	eventually(t, "o-1 to be paid", func() bool { in, err := loadInstance(b, "o-1"); return err == nil && in.State == "Shipped" })
	run(t, ctx, "reload o-1", chromedp.Reload(), chromedp.WaitVisible("#journal"), chromedp.Text("#saga-state", &text))
	if text != "Shipped" {
		t.Errorf("o-1's page after the send: state %q; want Shipped", text)
	}

	run(t, ctx, "end", chromedp.Navigate(base+"/instances/order/o-2"), chromedp.WaitVisible("#end-form"),
		chromedp.SetValue("#end-reason", "customer cancelled by phone <b>"), click("#end-submit"),
		chromedp.WaitVisible("#confirm-action"), chromedp.Text("#confirm-reason", &text))
	if text != "customer cancelled by phone <b>" {
		t.Errorf("the question shows the reason %q; want it as typed, as text", text)
	}
	screenshot(t, ctx, "instance-end-confirm")
	run(t, ctx, "confirm end", click("#confirm-action-yes"), chromedp.WaitVisible(".flash"), chromedp.Text("#saga-state", &text))
	if text != string(saga.Ended) {
		t.Errorf("o-2's page after the end: state %q; want %s", text, saga.Ended)
	}
	if in, _ := loadInstance(b, "o-2"); in.State != string(saga.Ended) {
		t.Errorf("o-2 in the store after the end: %q; want %s", in.State, saga.Ended)
	}
}

// In a browser, a body with right-to-left marks (ordinary in Hebrew or
// Arabic data) survives the send form's round trip: the question pre-fills
// the form's textarea with it as it is, and the event sent after an edit
// carries the marks, not the visible [U+200F] the page shows elsewhere.
func TestBrowserSendKeepsBidiMarks(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	pay := paymentType(t, b)
	ctx, _ := chrome(t)
	body := "{\"OrderID\":\"o-1\",\"Amount\":7,\"Note\":\"\u05e9\u05dc\u05d5\u05dd\u200f \u202bx\u202c\"}"
	var prefilled string
	run(t, ctx, "send", chromedp.Navigate(b.srv.URL+"/instances/order/o-1"), chromedp.WaitVisible("#send-form"),
		chromedp.SetValue("#send-type", pay), chromedp.SetValue("#send-body", body), click("#send-submit"),
		chromedp.WaitVisible("#confirm-action"), chromedp.Value("#send-body", &prefilled))
	if prefilled != body {
		t.Fatalf("the send form's textarea after the question holds %+q; want %+q", prefilled, body)
	}
	edited := strings.Replace(body, `"Amount":7`, `"Amount":8`, 1)
	run(t, ctx, "edit and send again", chromedp.Evaluate(`(() => { const a = document.querySelector('#send-body'); a.value = a.value.replace('"Amount":7', '"Amount":8'); })()`, nil),
		click("#send-submit"), chromedp.Poll(`document.querySelector('#confirm-body')?.textContent.includes('"Amount":8')`, nil),
		click("#confirm-action-yes"), chromedp.WaitVisible(".flash"))
	eventually(t, "o-1 to be paid", func() bool { in, err := loadInstance(b, "o-1"); return err == nil && in.State == "Shipped" })
	journal, err := b.st.Journal(t.Context(), store.Key{SagaType: "order", Key: "o-1"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range journal {
		if j.EventType == pay {
			got = append(got, string(j.Payload))
		}
	}
	if len(got) != 1 || got[0] != edited {
		t.Errorf("the payment journaled with bodies %+q; want one, %+q", got, edited)
	}
}

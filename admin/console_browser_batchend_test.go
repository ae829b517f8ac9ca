package admin_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/saga"
)

// From a filtered instance list, an operator ends all matching sagas: the
// console counts them and asks with the count and a reason; a set that
// changed meanwhile is refused with nothing ended, and the recount's
// confirmation ends exactly the sagas counted.
func TestBrowserBatchEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	ctx, _ := chrome(t)
	base := b.srv.URL
	var text string

	count := func(what string) string {
		t.Helper()
		var n string
		run(t, ctx, what, chromedp.Navigate(base+"/instances?type=order&prefix=o-"), chromedp.WaitVisible("#batch-end-button"),
			chromedp.Click("#batch-end-button"), chromedp.WaitVisible("#confirm-batch-end"), chromedp.Text("#batch-end-count", &n))
		return n
	}
	if n := count("count"); n != "3" {
		t.Fatalf("the question counts %s sagas; want 3 (o-1, o-2, o-3)", n)
	}
	run(t, ctx, "filter shown", chromedp.Text("#batch-end-filter", &text))
	if !strings.Contains(text, "prefix") || !strings.Contains(text, "o-") {
		t.Errorf("the question's filter: %q; want the prefix o-", text)
	}
	screenshot(t, ctx, "instances-batch-end-confirm")

	env, err := b.e.NewEnvelope("placed-o-4", orders.OrderPlaced{OrderID: "o-4", Items: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.e.Publish(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	eventually(t, "o-4 to exist", func() bool { in, err := loadInstance(b, "o-4"); return err == nil && in != nil })
	run(t, ctx, "confirm a stale count", chromedp.SendKeys("#batch-end-reason", "test orders"), chromedp.Click("#batch-end-yes"),
		chromedp.WaitVisible("section.card.narrow"), chromedp.Text("section.card.narrow", &text))
	if !strings.Contains(text, "Nothing was ended") || !strings.Contains(text, "changed since they were counted") {
		t.Errorf("confirming the count of before o-4: %q; want nothing ended, the set changed", text)
	}
	screenshot(t, ctx, "instances-batch-end-changed")
	if in, _ := loadInstance(b, "o-1"); in.State == string(saga.Ended) {
		t.Fatal("a refused batch ended o-1")
	}

	if n := count("recount"); n != "4" {
		t.Fatalf("the recount counts %s sagas; want 4", n)
	}
	run(t, ctx, "confirm", chromedp.SendKeys("#batch-end-reason", "test orders"), chromedp.Click("#batch-end-yes"),
		chromedp.WaitVisible("#batch-end-done"), chromedp.Text("#batch-end-done", &text))
	if !strings.Contains(text, "4 saga(s) ended") {
		t.Errorf("after the end: %q; want 4 ended", text)
	}
	screenshot(t, ctx, "instances-batch-end-done")
	for _, k := range []string{"o-1", "o-2", "o-3", "o-4"} {
		if in, _ := loadInstance(b, k); in.State != string(saga.Ended) {
			t.Errorf("%s after the batch: %q; want %s", k, in.State, saga.Ended)
		}
	}
	if in, _ := loadInstance(b, "x-9"); in.State == string(saga.Ended) {
		t.Error("the batch ended x-9, which its filter does not select")
	}
}

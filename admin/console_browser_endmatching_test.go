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
// that changed meanwhile ends the sagas counted that did not change and
// says how many it skipped, and the recount's confirmation ends the rest.
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
			click("#batch-end-button"), chromedp.WaitVisible("#confirm-batch-end"), chromedp.Text("#batch-end-count", &n))
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
	bump(t, b, "o-1")
	run(t, ctx, "confirm a count that changed", chromedp.SendKeys("#batch-end-reason", "test orders"), click("#batch-end-yes"),
		chromedp.WaitVisible("#batch-end-done"), chromedp.Text("#batch-end-done", &text))
	if !strings.Contains(text, "2 saga(s) ended") || !strings.Contains(text, "1 skipped") {
		t.Errorf("confirming the count after o-1 moved on and o-4 joined: %q; want 2 ended, 1 skipped", text)
	}
	screenshot(t, ctx, "instances-batch-end-changed")
	for k, want := range map[string]bool{"o-1": false, "o-2": true, "o-3": true, "o-4": false} {
		if in, _ := loadInstance(b, k); (in.State == string(saga.Ended)) != want {
			t.Errorf("%s after the batch: %q; want ended %v", k, in.State, want)
		}
	}

	if n := count("recount"); n != "2" {
		t.Fatalf("the recount counts %s sagas; want 2 (o-1, o-4)", n)
	}
	run(t, ctx, "confirm", chromedp.SendKeys("#batch-end-reason", "test orders"), click("#batch-end-yes"),
		chromedp.WaitVisible("#batch-end-done"), chromedp.Text("#batch-end-done", &text))
	if !strings.Contains(text, "2 saga(s) ended") {
		t.Errorf("after the end: %q; want 2 ended", text)
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

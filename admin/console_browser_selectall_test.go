package admin_test

import (
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The dead letters list has a box that ticks every row's box on the page,
// and clears them.
func TestBrowserSelectAll(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	now := time.Now().Add(-time.Minute)
	record(t, b, unknownType("sa-1", now), unknownType("sa-2", now), unknownType("sa-3", now))
	ctx, _ := chrome(t)
	const ticked = `[...document.querySelectorAll('input[type=checkbox][form="selected"]')].filter(b => b.checked).length`
	var n int
	run(t, ctx, "select all", chromedp.Navigate(b.srv.URL+"/dead-letters"), chromedp.WaitVisible(`tr[data-id="sa-3"]`),
		chromedp.WaitVisible(`input.select-all`), click(`input.select-all`), chromedp.Evaluate(ticked, &n))
	if n != 3 {
		t.Errorf("after select all, %d of 3 rows are ticked", n)
	}
	run(t, ctx, "clear all", click(`input.select-all`), chromedp.Evaluate(ticked, &n))
	if n != 0 {
		t.Errorf("after clearing select all, %d rows are ticked, want 0", n)
	}
}

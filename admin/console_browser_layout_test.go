package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store"
)

// fitsIn is a script that lists the elements matching sel whose right
// edge passes their container's (the closest card, else the viewport), by
// more than a pixel, with the widths.
const fitsIn = `[...document.querySelectorAll(%q)].flatMap(e => {
  const box = e.closest(".card") || document.documentElement, r = e.getBoundingClientRect(), c = box.getBoundingClientRect();
  const right = Math.min(c.right, window.innerWidth);
  return r.right > right + 1 ? [e.tagName + "." + e.className + ": right " + Math.round(r.right) + " past " + Math.round(right)] : [];
})`

// pageFits checks that the document is no wider than the viewport, and
// that every element matching each selector stays within its card.
func pageFits(t *testing.T, ctx context.Context, what string, sels ...string) {
	t.Helper()
	var w struct{ Doc, View float64 }
	run(t, ctx, what+": width", chromedp.Evaluate(`({Doc: document.documentElement.scrollWidth, View: window.innerWidth})`, &w))
	if w.Doc > w.View+1 {
		t.Errorf("%s: the page is %.0f px wide in a %.0f px window", what, w.Doc, w.View)
	}
	for _, sel := range sels {
		var over []string
		run(t, ctx, what+": "+sel, chromedp.Evaluate(fmt.Sprintf(fitsIn, sel), &over))
		if len(over) > 0 {
			t.Errorf("%s: %s passes its card: %v", what, sel, over)
		}
	}
}

// Tables stay inside their cards at 1,400 px, with long errors (up to
// 20 kB), long keys and a long state diagram; the navigation shows every
// page at 1,024 px; the dead-letter list shows more of an error than its
// prefix; a question on the instance page opens in view.
func TestBrowserLayoutFits(t *testing.T) {
	t.Parallel()
	b := setupWith(t, nil, 0, searchimportShape())
	seed(t, b)
	ctx, _ := chrome(t)
	now := time.Now().Add(-time.Minute)
	longKey := "k-" + strings.Repeat("0123456789", 12)
	env, err := b.e.NewEnvelope("placed-long", orders.OrderPlaced{OrderID: longKey, Items: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.e.Publish(t.Context(), env); err != nil {
		t.Fatal(err)
	}
	prefix := "apply orders.OrderPlaced: handler: call payments service: "
	var dls []store.DeadLetter
	for i, tail := range []string{strings.Repeat("upstream said the card was declined for a reason nobody wrote down ", 6),
		strings.Repeat("x", 20<<10), "connection reset by peer while reading the response body from https://payments.example.com/v1/charges/ch_3Nxyz"} {
		d := unknownType(fmt.Sprintf("lay-%d", i), now)
		d.Reason, d.Error = "permanent_error", prefix+tail
		dls = append(dls, d)
	}
	record(t, b, dls...)
	eventually(t, "the long key's saga", func() bool { in, err := loadInstance(b, longKey); return err == nil && in != nil })

	run(t, ctx, "dead letters at 1400", chromedp.EmulateViewport(1400, 900), chromedp.Navigate(b.srv.URL+"/dead-letters"), chromedp.WaitVisible("table.groups"))
	pageFits(t, ctx, "dead letters", "table.groups", "table.groups button", "table.deadletters")
	var shown float64
	run(t, ctx, "error text", chromedp.Evaluate(`Math.max(...[...document.querySelectorAll("table.deadletters .errtext")].map(e => e.getBoundingClientRect().width * Math.round(e.getBoundingClientRect().height / parseFloat(getComputedStyle(e).lineHeight))))`, &shown))
	if shown < float64(len(prefix))*8 { // room for more than the boilerplate prefix, at about 7-8 px a character
		t.Errorf("the dead-letter list shows %.0f px of error text, want room for more than its %d-character prefix", shown, len(prefix))
	}
	screenshot(t, ctx, "layout-dead-letters")
	for i := range 2 {
		run(t, ctx, "dead letter", chromedp.Navigate(b.srv.URL+fmt.Sprintf("/dead-letters/lay-%d", i)), chromedp.WaitVisible("table.replays"))
		pageFits(t, ctx, fmt.Sprintf("dead letter lay-%d", i), "table.replays")
	}

	run(t, ctx, "timers", chromedp.Navigate(b.srv.URL+"/timers"), chromedp.WaitVisible("table.timers"))
	pageFits(t, ctx, "timers", "table.timers")
	var overlap []string
	run(t, ctx, "key cells", chromedp.Evaluate(`[...document.querySelectorAll("table.timers tbody tr")].flatMap(tr => {
		const key = tr.children[0], name = tr.children[1];
		const inner = Math.max(...[...key.querySelectorAll("a, span")].map(e => Math.min(e.getBoundingClientRect().right, key.getBoundingClientRect().right + (getComputedStyle(key).overflow === "hidden" ? 0 : 1e6))));
		return inner > name.getBoundingClientRect().left + 1 ? [tr.id] : [];
	})`, &overlap))
	if len(overlap) > 0 {
		t.Errorf("timers: a key runs under the Name column in rows %v", overlap)
	}

	run(t, ctx, "saga types at 1280", chromedp.EmulateViewport(1280, 900), chromedp.Navigate(b.srv.URL+"/sagas"), chromedp.WaitVisible("#type-searchimport .diagram svg .node"))
	pageFits(t, ctx, "saga types", ".diagram svg", ".diagram .node.final")
	screenshot(t, ctx, "layout-saga-types")

	run(t, ctx, "nav at 1024", chromedp.EmulateViewport(1024, 768), chromedp.Navigate(b.srv.URL+"/"), chromedp.WaitVisible("#overview"))
	var hidden []string
	run(t, ctx, "nav links", chromedp.Evaluate(`[...document.querySelectorAll("header nav a")].filter(a => { const r = a.getBoundingClientRect(), n = a.parentElement.getBoundingClientRect();
		return r.right > Math.min(n.right, window.innerWidth) + 1 || r.bottom > n.bottom + 1 || r.width === 0; }).map(a => a.textContent)`, &hidden))
	if len(hidden) > 0 {
		t.Errorf("at 1,024 px the navigation hides %q", hidden)
	}
	screenshot(t, ctx, "layout-nav-1024")

	run(t, ctx, "end question", chromedp.EmulateViewport(1400, 700), chromedp.Navigate(b.srv.URL+"/instances/order/o-1"), chromedp.WaitVisible("#end-reason"),
		chromedp.SetValue("#end-reason", "layout check"), click("#end-submit"), chromedp.WaitVisible("#confirm-action"))
	var top struct{ Top, Bottom, View float64 }
	run(t, ctx, "question in view", chromedp.Poll(`(() => { const r = document.querySelector("#confirm-action").getBoundingClientRect(); return r.top >= 0 && r.top < window.innerHeight; })()`, nil, chromedp.WithPollingTimeout(5*time.Second)))
	run(t, ctx, "question box", chromedp.Evaluate(`(() => { const r = document.querySelector("#confirm-action").getBoundingClientRect(); return {Top: r.top, Bottom: r.bottom, View: window.innerHeight}; })()`, &top))
	if top.Top < 0 || top.Top >= top.View {
		t.Errorf("the end question opens at %.0f px in a %.0f px window: want it in view", top.Top, top.View)
	}
	screenshot(t, ctx, "layout-end-question")
}

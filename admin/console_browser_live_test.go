package admin_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// insertOrders stores n order instances keyed prefix000, prefix001, ...
// behind the console's back, updated at updated.
func insertOrders(t *testing.T, b *bundle, prefix string, n int, updated time.Time) {
	t.Helper()
	var ins []*store.Instance
	for i := range n {
		ins = append(ins, &store.Instance{SagaType: "order", Key: fmt.Sprintf("%s%03d", prefix, i), State: "AwaitingPayment",
			Data: []byte(`{}`), SchemaVersion: 1, Version: 1, CreatedAt: updated, UpdatedAt: updated})
	}
	commitChanges(t, b.st, &store.Changes{Inserts: ins})
}

// liveTicks reads how many times the live region has ticked (refreshed or
// skipped while paused).
func liveTicks(t *testing.T, ctx context.Context) int {
	t.Helper()
	var n int
	run(t, ctx, "live ticks", chromedp.Evaluate(`Number(document.querySelector("#main").dataset.liveTicks || 0)`, &n))
	return n
}

// A row stored behind an open page appears without a reload; while the
// operator types in a field, the page stays as it is.
func TestBrowserLiveUpdates(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	ctx, _ := chrome(t)
	var text string
	var marker int
	run(t, ctx, "instances", chromedp.Navigate(b.srv.URL+"/instances"), chromedp.WaitVisible("#instances"),
		chromedp.Poll(`document.querySelector("#live-toggle").dataset.state === "live"`, nil),
		chromedp.Evaluate(`window.liveMarker = 7`, &marker),
		chromedp.Evaluate(`document.querySelector("#instances").liveMarker = 7`, &marker))
	insertOrders(t, b, "live-", 1, time.Now())
	run(t, ctx, "the new row", chromedp.Poll(`document.querySelector("#instances").innerText.includes("live-000")`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Evaluate(`window.liveMarker`, &marker))
	if marker != 7 {
		t.Errorf("the page was reloaded to show the new row (marker %d, want 7): want it swapped in", marker)
	}
	var kept bool
	run(t, ctx, "the table kept", chromedp.Evaluate(`document.querySelector("#instances").liveMarker === 7`, &kept))
	if !kept {
		t.Error("the refresh replaced the table: want it patched in place, so that a row under the pointer stays")
	}
	screenshot(t, ctx, "instances-live")

	// Typing in the prefix field pauses the page.
	run(t, ctx, "type", click(`input[name="prefix"]`), chromedp.SendKeys(`input[name="prefix"]`, "o-"),
		chromedp.Poll(`document.querySelector("#live-toggle").dataset.state === "paused"`, nil),
		chromedp.Text("#live-toggle", &text))
	if !strings.Contains(text, "paused: typing") {
		t.Errorf("indicator while typing: %q, want it to say paused: typing", text)
	}
	screenshot(t, ctx, "instances-live-paused")
	from := liveTicks(t, ctx)
	insertOrders(t, b, "paused-", 1, time.Now())
	run(t, ctx, "two ticks while typing", chromedp.Poll(fmt.Sprintf(`Number(document.querySelector("#main").dataset.liveTicks) >= %d`, from+2), nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Text("#instances", &text))
	if strings.Contains(text, "paused-000") {
		t.Error("the page was refreshed while a field had focus and unsent text")
	}
	var typed string
	run(t, ctx, "typed text", chromedp.Value(`input[name="prefix"]`, &typed))
	if typed != "o-" {
		t.Errorf("the prefix field holds %q after the pause, want the text typed (o-)", typed)
	}
	// Done typing (the field cleared and left): the page is live again.
	run(t, ctx, "resume", chromedp.Evaluate(`document.querySelector('input[name="prefix"]').value = "", document.activeElement.blur(), 0`, &marker),
		chromedp.Poll(`document.querySelector("#instances").innerText.includes("paused-000")`, nil, chromedp.WithPollingTimeout(30*time.Second)))

	// The toggle turns live updates off, and that is remembered.
	run(t, ctx, "pause by hand", click("#live-toggle"), chromedp.Text("#live-toggle", &text))
	if !strings.Contains(text, "paused") {
		t.Errorf("indicator after a click: %q, want paused", text)
	}
	run(t, ctx, "still paused after navigating", chromedp.Navigate(b.srv.URL+"/timers"), chromedp.WaitVisible("table.timers"),
		chromedp.Poll(`document.querySelector("#live-toggle").dataset.state === "paused"`, nil),
		click("#live-toggle"), chromedp.Poll(`document.querySelector("#live-toggle").dataset.state === "live"`, nil))
}

// The instances and timers lists count what their filters select, and
// page forwards and back.
func TestBrowserCountsAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	insertOrders(t, b, "p-", 120, time.Now().Add(-time.Hour))
	ctx, _ := chrome(t)
	var count, rows string
	page := func(what, sel, first, last string) {
		t.Helper()
		run(t, ctx, what, click(sel),
			chromedp.Poll(fmt.Sprintf(`(() => { const r = [...document.querySelectorAll("#instances tbody tr")]; return r.length > 0 && r[0].innerText.includes(%q) && r[r.length-1].innerText.includes(%q); })()`, first, last), nil),
			chromedp.Text("#instances-count", &count))
		if !strings.Contains(count, "120 instance(s) match") {
			t.Errorf("%s: count %q, want 120", what, count)
		}
	}
	run(t, ctx, "first page", chromedp.Navigate(b.srv.URL+"/instances?prefix=p-"), chromedp.WaitVisible("#instances-count"),
		chromedp.Text("#instances-count", &count), chromedp.Text("#instances tbody tr:first-child", &rows))
	if !strings.Contains(count, "120 instance(s) match") || !strings.Contains(rows, "p-000") {
		t.Errorf("first page: count %q, first row %q; want 120 and p-000", count, rows)
	}
	var prev bool
	run(t, ctx, "no previous on the first page", chromedp.Evaluate(`!!document.querySelector("#page-prev")`, &prev))
	if prev {
		t.Error("the first page links to a previous page")
	}
	screenshot(t, ctx, "instances-count")
	page("second page", "#page-next", "p-050", "p-099")
	page("third page", "#page-next", "p-100", "p-119")
	var next bool
	run(t, ctx, "no next on the last page", chromedp.Evaluate(`!!document.querySelector("#page-next")`, &next))
	if next {
		t.Error("the last page links to a next page")
	}
	page("back to the second", "#page-prev", "p-050", "p-099")
	page("back to the first", "#page-prev", "p-000", "p-049")
	run(t, ctx, "no previous on the first page again", chromedp.Evaluate(`!!document.querySelector("#page-prev")`, &prev))
	if prev {
		t.Error("back on the first page: it links to a previous page")
	}

	// Timers: 60 due one minute apart, counted, paged, and filtered by due time.
	base := time.Now().Add(time.Hour).UTC().Truncate(time.Minute)
	var ts []store.Timer
	for i := range 60 {
		ts = append(ts, store.Timer{SagaType: "order", Key: fmt.Sprintf("p-%03d", i), Name: "reminder", DueAt: base.Add(time.Duration(i) * time.Minute),
			Envelope: idem.Envelope{ID: fmt.Sprintf("remind-%03d", i), Type: "orders.PaymentOverdue", Body: []byte(`{}`)}})
	}
	commitChanges(t, b.st, &store.Changes{Timers: ts})
	run(t, ctx, "timers", chromedp.Navigate(b.srv.URL+"/timers?type=order"), chromedp.WaitVisible("#timers-count"),
		chromedp.Text("#timers-count", &count))
	if !strings.Contains(count, "60 timer(s) match") {
		t.Errorf("timers count: %q, want 60", count)
	}
	run(t, ctx, "timers next", click("#page-next"),
		chromedp.Poll(`document.querySelectorAll("table.timers tbody tr").length === 10`, nil),
		click("#page-prev"),
		chromedp.Poll(`document.querySelectorAll("table.timers tbody tr").length === 50 && document.querySelector("table.timers tbody tr").innerText.includes("p-000")`, nil))
	to := base.Add(5 * time.Minute).Format("2006-01-02T15:04:05")
	var ok bool
	run(t, ctx, "due before", chromedp.Evaluate(fmt.Sprintf(`document.querySelector('input[name="to"]').value = %q, true`, to), &ok), click(`form.filters button.primary`),
		chromedp.Poll(`document.querySelectorAll("table.timers tbody tr").length === 5`, nil),
		chromedp.Text("#timers-count", &count))
	if !strings.Contains(count, "5 timer(s) match") {
		t.Errorf("timers due before %s: count %q, want 5", to, count)
	}
	// The filtered page is live: its fields hold what the page came with.
	var state string
	if err := chromedp.Run(ctx, chromedp.Poll(`document.querySelector("#live-toggle").dataset.state === "live"`, nil, chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		run(t, ctx, "indicator", chromedp.Text("#live-toggle", &state))
		t.Errorf("the page filtered by due time is not live: indicator %q", state)
	}
	screenshot(t, ctx, "timers-range")
}

// One control switches every time between relative and absolute; the
// choice survives a reload.
func TestBrowserTimeToggle(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	updated := time.Date(2026, 11, 25, 9, 30, 15, 0, time.UTC)
	insertOrders(t, b, "t-", 1, updated)
	ctx, _ := chrome(t)
	var shown string
	cell := `#instances tbody tr:first-child td:nth-child(6)`
	run(t, ctx, "relative first", chromedp.Navigate(b.srv.URL+"/instances"), chromedp.WaitVisible(cell+" time"), chromedp.Text(cell, &shown))
	if !strings.Contains(shown, "ago") {
		t.Errorf("updated shown as %q, want a relative time by default", shown)
	}
	run(t, ctx, "absolute", click("#time-toggle"), chromedp.Poll(`document.documentElement.classList.contains("time-abs")`, nil), chromedp.Text(cell, &shown))
	if strings.TrimSpace(shown) != "2026-11-25 09:30:15 UTC" {
		t.Errorf("updated shown as %q after the toggle, want 2026-11-25 09:30:15 UTC", shown)
	}
	screenshot(t, ctx, "instances-absolute")
	run(t, ctx, "remembered", chromedp.Navigate(b.srv.URL+"/instances"), chromedp.WaitVisible(cell+" time"), chromedp.Text(cell, &shown))
	if strings.TrimSpace(shown) != "2026-11-25 09:30:15 UTC" {
		t.Errorf("after a reload: %q, want the absolute time kept", shown)
	}
	run(t, ctx, "back to relative", click("#time-toggle"), chromedp.Text(cell, &shown))
	if !strings.Contains(shown, "ago") {
		t.Errorf("toggled back: %q, want a relative time", shown)
	}
}

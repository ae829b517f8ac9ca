package admin_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// The overview draws three charts from the series; applied messages show
// on the throughput chart, and a live refresh keeps the same three charts
// (no duplicate, no new uPlot instance).
func TestBrowserOverviewCharts(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	chartServer(t, b, 200*time.Millisecond)
	seed(t, b)
	ctx, dialog := chrome(t)
	var n int
	run(t, ctx, "overview", chromedp.Navigate(b.srv.URL+"/"), chromedp.WaitVisible("#rate-applied"),
		chromedp.Poll(`document.querySelectorAll("#charts .uplot").length === 3`, nil, chromedp.WithPollingTimeout(30*time.Second)))
	for i := range 3 {
		applyOrders(t, b, fmt.Sprintf("chart-%d-", i), 10)
		from := liveTicks(t, ctx)
		run(t, ctx, "a refresh", chromedp.Poll(fmt.Sprintf(`Number(document.querySelector("#main").dataset.liveTicks) >= %d`, from+2), nil, chromedp.WithPollingTimeout(30*time.Second)))
	}
	run(t, ctx, "a point of throughput", chromedp.Poll(`Number(document.querySelector("#chart-throughput").dataset.max) > 0`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Evaluate(`document.querySelectorAll("#charts .uplot").forEach(u => u.chartMarker = 7), 0`, &n))

	from := liveTicks(t, ctx)
	run(t, ctx, "two live refreshes", chromedp.Poll(fmt.Sprintf(`Number(document.querySelector("#main").dataset.liveTicks) >= %d`, from+2), nil, chromedp.WithPollingTimeout(30*time.Second)))
	var charts, canvases, kept int
	var hidden bool
	run(t, ctx, "the charts after the refresh",
		chromedp.Evaluate(`document.querySelectorAll("#charts .uplot").length`, &charts),
		chromedp.Evaluate(`document.querySelectorAll("#charts canvas").length`, &canvases),
		chromedp.Evaluate(`[...document.querySelectorAll("#charts .uplot")].filter(u => u.chartMarker === 7).length`, &kept),
		chromedp.Evaluate(`document.querySelector("#charts").hidden`, &hidden))
	if charts != 3 || canvases != 3 || hidden {
		t.Errorf("after a live refresh: %d charts, %d canvases, hidden %v; want exactly three, shown", charts, canvases, hidden)
	}
	if kept != 3 {
		t.Errorf("after a live refresh %d of the 3 charts are the ones drawn before: want the same instances updated, not new ones", kept)
	}
	if dialog.Load() {
		t.Error("a JavaScript dialog opened")
	}
	screenshot(t, ctx, "overview")

	// A boosted navigation away and back draws three charts again, not six.
	run(t, ctx, "away and back", click(`nav a[href="/sagas"]`), chromedp.WaitVisible(".diagram svg"),
		click(`nav a[href="/"]`), chromedp.WaitVisible("#rate-applied"),
		chromedp.Poll(`document.querySelectorAll("#charts .uplot").length === 3`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Evaluate(`document.querySelectorAll(".uplot").length`, &charts))
	if charts != 3 {
		t.Errorf("after navigating away and back: %d charts, want 3", charts)
	}
}

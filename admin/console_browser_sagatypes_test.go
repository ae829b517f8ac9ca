package admin_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// The Saga types page keeps its diagrams through the live refresh: the
// refresh morphs the page and the diagrams are drawn again, the table meant
// for browsers without JavaScript stays folded, and the indicator says
// live, at first load and after the refresh.
func TestBrowserSagaTypesSurviveRefresh(t *testing.T) {
	t.Parallel()
	b := setupWith(t, nil, 0, pingPongMachine())
	seed(t, b)
	ctx, _ := chrome(t)
	var first string
	run(t, ctx, "saga types", chromedp.Navigate(b.srv.URL+"/sagas"), chromedp.WaitVisible(`#type-pingpong .diagram svg .node`),
		chromedp.Evaluate(`window.refreshed = 0; document.addEventListener("idem:refreshed", () => window.refreshed++), true`, nil),
		chromedp.Text("#live-toggle", &first))
	if strings.Contains(first, "paused") {
		t.Errorf("at first load the indicator says %q, want live", first)
	}
	run(t, ctx, "a refresh", livePoll(`window.refreshed >= 1`))
	var after struct {
		Nodes     int
		TableOpen bool
		Indicator string
	}
	run(t, ctx, "after the refresh", livePoll(`document.querySelectorAll("#type-pingpong .diagram svg .node").length > 0`),
		chromedp.Evaluate(`({Nodes: document.querySelectorAll(".diagram svg .node").length,
			TableOpen: document.querySelector("#type-pingpong details.transitions").open,
			Indicator: document.querySelector("#live-toggle").textContent})`, &after))
	if after.Nodes == 0 || after.TableOpen || strings.Contains(after.Indicator, "paused") {
		t.Errorf("after a refresh: %d diagram nodes, transitions table open=%v, indicator %q: want the diagram, the table folded, live", after.Nodes, after.TableOpen, after.Indicator)
	}
	run(t, ctx, "a second refresh", livePoll(`window.refreshed >= 2`))
	var nodes int
	run(t, ctx, "nodes", chromedp.Evaluate(fmt.Sprintf(`document.querySelectorAll(%q).length`, "#type-pingpong .diagram svg .node"), &nodes))
	if nodes == 0 {
		t.Error("after two refreshes the diagram is gone")
	}
}

package admin_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// In a browser: the Deploys page, reached from the nav, shows the check's
// verdict, the order saga's states with the hazard marked on the state
// the registered machine lacks, and both definitions with their replicas.
func TestBrowserDeploys(t *testing.T) {
	t.Parallel()
	ctx, dialog := chrome(t)
	b := setup(t, nil)
	seedDeploy(t, b, 3)
	const packing = `section[data-saga-type="order"] tr[data-state="Packing"].hazard`
	var verdict, mark, states, defs string
	var marks int
	run(t, ctx, "the Deploys page from the nav", chromedp.Navigate(b.srv.URL+"/"), click(`nav a[href="/deploys"]`),
		chromedp.WaitVisible(packing+` .pill.hazard[data-kind="state-removed"]`), settled(),
		chromedp.Text("#deploy-verdict", &verdict), chromedp.Text(packing+" .pill.hazard", &mark),
		chromedp.Text(`section[data-saga-type="order"] table.deploy-states`, &states),
		chromedp.Text(`section[data-saga-type="order"] table.deploy-definitions`, &defs),
		chromedp.Evaluate(`document.querySelectorAll("tr.hazard .pill.hazard").length`, &marks))
	if !strings.HasPrefix(verdict, "Not safe to deploy: 1 hazard(s), 1 notice(s).") {
		t.Errorf("verdict %q, want not safe with 1 hazard and 1 notice", verdict)
	}
	if got := strings.Join(strings.Fields(mark), " "); got != "state-removed 3" {
		t.Errorf("mark on Packing: %q, want state-removed 3", got)
	}
	if marks != 1 {
		t.Errorf("%d hazard marks on state rows, want 1 (Packing's)", marks)
	}
	for _, want := range []string{"AwaitingPayment", "v1: 2", "Packing", "v1: 3"} {
		if !strings.Contains(states, want) {
			t.Errorf("states table %q lacks %q", states, want)
		}
	}
	for _, want := range []string{"this console's build", oldReplica, "alive", "this console"} {
		if !strings.Contains(defs, want) {
			t.Errorf("definitions table %q lacks %q", defs, want)
		}
	}
	screenshot(t, ctx, "deploys")
	if dialog.Load() {
		t.Error("a JavaScript dialog opened")
	}
}

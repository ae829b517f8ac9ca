package admin_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// chrome starts a headless Chromium with a 1280x800 window and returns its
// context, and a flag that is set when any JavaScript dialog opens.
func chrome(t *testing.T) (context.Context, *atomic.Bool) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(testenv.Chromium(t)), chromedp.NoSandbox, chromedp.WindowSize(1280, 800),
		chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	dialog := &atomic.Bool{}
	chromedp.ListenTarget(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			dialog.Store(true)
			go func() { _ = chromedp.Run(ctx, page.HandleJavaScriptDialog(false)) }()
		}
	})
	if err := chromedp.Run(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	return ctx, dialog
}

// screenshot saves the viewport as name.png under IDEM_SCREENSHOTS, or in
// the test's temporary directory.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("IDEM_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	var png []byte
	if err := chromedp.Run(ctx, chromedp.CaptureScreenshot(&png)); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// click clicks the element sel selects once the page has settled. After
// htmx swaps in a page it settles for 20 ms and only then scrolls a
// boosted page to the top (and console.js brings a question into view, a
// task later): a click whose position was read before that scroll lands
// elsewhere, and the step then waits for a page that never comes.
func click(sel any, opts ...chromedp.QueryOption) chromedp.Action {
	return chromedp.Tasks{settled(), chromedp.Click(sel, opts...)}
}

// settled waits until no htmx request, swap or settle is under way, then
// until the tasks those queued (console.js's revealQuestion) have run.
func settled() chromedp.Action {
	return chromedp.ActionFunc(func(ctx context.Context) error {
		if err := chromedp.Poll(`!document.querySelector(".htmx-request, .htmx-swapping, .htmx-settling")`, nil).Do(ctx); err != nil {
			return fmt.Errorf("wait for htmx to settle: %w", err)
		}
		return chromedp.Evaluate(`new Promise(done => setTimeout(done, 0))`, nil, func(p *runtime.EvaluateParams) *runtime.EvaluateParams {
			return p.WithAwaitPromise(true)
		}).Do(ctx)
	})
}

func run(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func TestBrowserConsole(t *testing.T) {
	t.Parallel()
	b := setupWith(t, nil, 0, enginetest.POMachine(), jobMachine())
	seed(t, b)
	seedPO(t, b)
	seedJob(t, b)
	addTimer(t, b, "ingest-job", jobKey) // a timer of a finished saga
	ctx, dialog := chrome(t)
	base := b.srv.URL

	var text string
	run(t, ctx, "overview", chromedp.Navigate(base+"/"), chromedp.WaitVisible("#rate-applied"), chromedp.Text("#overview", &text))
	if !strings.Contains(text, "AwaitingPayment") || !strings.Contains(strings.ToLower(text), "outbox backlog") {
		t.Errorf("overview text lacks the order states or the backlog:\n%s", text)
	}
	screenshot(t, ctx, "overview-seeded")

	run(t, ctx, "saga types", chromedp.Navigate(base+"/sagas"), chromedp.WaitVisible(".diagram svg .node"), chromedp.Text("#type-order", &text))
	if !strings.Contains(text, "AwaitingPayment") || !strings.Contains(text, "Shipped") {
		t.Errorf("saga type card lacks its states:\n%s", text)
	}
	screenshot(t, ctx, "saga-types")

	// Filter the instances: type order, key prefix o-: x-9 goes away.
	run(t, ctx, "filter instances", chromedp.Navigate(base+"/instances"), chromedp.WaitVisible("#instances"),
		chromedp.SetValue(`select[name="type"]`, "order"), chromedp.SendKeys(`input[name="prefix"]`, "o-"),
		click(`form.filters button.primary`),
		chromedp.Poll(`!document.querySelector("#instances").innerText.includes("x-9")`, nil),
		chromedp.Text("#instances", &text))
	if !strings.Contains(text, "o-1") || !strings.Contains(text, "o-3") || strings.Contains(text, "x-9") {
		t.Errorf("instances filtered by prefix o-: got\n%s", text)
	}
	screenshot(t, ctx, "instances")

	// Filter by a business attribute, typed in NFD: only po-1 (Müller).
	run(t, ctx, "filter by attribute", chromedp.Navigate(base+"/instances"), chromedp.WaitVisible("#instances"),
		chromedp.SetValue("#attr-filter", "supplier=Mu\u0308ller"), click(`form.filters button.primary`),
		chromedp.Poll(`!document.querySelector("#instances").innerText.includes("x-9")`, nil),
		chromedp.Text("#instances", &text))
	if !strings.Contains(text, "po-1") || strings.Contains(text, "po-2") || !strings.Contains(text, "supplier=M\u00fcller") {
		t.Errorf("instances filtered by supplier=Müller: got\n%s", text)
	}
	screenshot(t, ctx, "instances-attribute")
	run(t, ctx, "attributes of po-3", chromedp.Navigate(base+"/instances/purchase-order/po-3"), chromedp.WaitVisible("#attributes"),
		chromedp.Text("#attributes", &text))
	if !strings.Contains(text, "supplier="+hostileSupplier) {
		t.Errorf("attributes of po-3: got %q, want the hostile supplier as text", text)
	}

	// A saga's timeline.
	run(t, ctx, "timeline", chromedp.Navigate(base+"/instances/order/o-1"), chromedp.WaitVisible("#journal li"), chromedp.Text("#journal", &text))
	if !strings.Contains(text, "OrderPlaced") || !strings.Contains(text, "Initial → AwaitingPayment") {
		t.Errorf("journal of o-1: got\n%s", text)
	}
	run(t, ctx, "why", chromedp.Text("#why", &text))
	if !strings.Contains(text, "waiting for one of: PaymentReceived, PaymentOverdue") || !strings.Contains(text, "PaymentReceived → Shipped") {
		t.Errorf("Why panel of o-1: got\n%s", text)
	}
	screenshot(t, ctx, "instance")

	// Cancel a timer from the saga's page.
	run(t, ctx, "cancel timer", chromedp.Navigate(base+"/instances/order/o-2"), chromedp.WaitVisible(`button[data-action="cancel-timer"]`),
		click(`button[data-action="cancel-timer"]`), chromedp.WaitVisible("#confirm-cancel"))
	if n := timerCount(t, b, "o-2"); n != 1 {
		t.Errorf("cancel clicked, not confirmed: %d timers of o-2, want 1", n)
	}
	screenshot(t, ctx, "timer-cancel-confirm")
	run(t, ctx, "confirm cancel", click("#confirm-cancel"), chromedp.WaitVisible(".flash"), chromedp.Text(".flash", &text))
	if !strings.Contains(text, "timer cancelled") {
		t.Errorf("after cancel: flash %q", text)
	}
	if n := timerCount(t, b, "o-2"); n != 0 {
		t.Errorf("after cancel in the browser: %d timers of o-2, want 0", n)
	}

	run(t, ctx, "timers", chromedp.Navigate(base+"/timers"), chromedp.WaitVisible("table.timers"), chromedp.Text("table.timers", &text))
	if !strings.Contains(text, "saga finished") {
		t.Errorf("timers page: the timer of the finished saga o-3 is not marked:\n%s", text)
	}
	// Every cell of a row is a table cell with its bottom border on one line.
	var misaligned []string
	run(t, ctx, "timer cells", chromedp.Evaluate(`[...document.querySelectorAll("table.timers tbody tr")].flatMap(tr => {
		const cells = [...tr.children], bottom = cells[0].getBoundingClientRect().bottom;
		return cells.filter(td => getComputedStyle(td).display !== "table-cell" || Math.abs(td.getBoundingClientRect().bottom - bottom) > 0.5)
			.map(td => td.className + ": " + getComputedStyle(td).display);
	})`, &misaligned))
	if len(misaligned) > 0 {
		t.Errorf("timers table: cells out of line with their row (display, border): %v", misaligned)
	}
	screenshot(t, ctx, "timers")

	run(t, ctx, "dead letter", chromedp.Navigate(base+"/dead-letters/placed-o-dead"), chromedp.WaitVisible(".error-chain"))
	screenshot(t, ctx, "dead-letter")

	// Bulk replay shows the count first.
	run(t, ctx, "bulk confirm", chromedp.Navigate(base+"/dead-letters?reason=unknown_type"), chromedp.WaitVisible(".row.bulk"),
		click(`.row.bulk button`), chromedp.WaitVisible("#confirm-bulk"), chromedp.Text("#confirm-title", &text))
	if !strings.Contains(text, "Replay 2 dead letter") {
		t.Errorf("bulk replay confirmation: %q, want the count 2", text)
	}
	screenshot(t, ctx, "dead-letters-confirm")
	// The reason chips show every reason and the total, whatever the filter.
	run(t, ctx, "reason chips", chromedp.Text(".reasons", &text))
	text = strings.Join(strings.Fields(text), " ")
	if !strings.Contains(text, "all 3") || !strings.Contains(text, "store_unavailable 1") || !strings.Contains(text, "unknown_type 2") {
		t.Errorf("reason chips with reason=unknown_type: %q, want all 3, unknown_type 2 and store_unavailable 1", text)
	}

	// Replay one dead letter and see it applied.
	run(t, ctx, "replay", chromedp.Navigate(base+"/dead-letters?reason=store_unavailable"), chromedp.WaitVisible(`button[data-action="replay"]`))
	screenshot(t, ctx, "dead-letters")
	run(t, ctx, "replay click", click(`button[data-action="replay"]`), chromedp.WaitVisible(".flash"), chromedp.Text(".flash", &text))
	if !strings.Contains(text, "re-queued") || strings.Contains(text, "will apply") {
		t.Errorf("flash after a replay: %q, want it to say re-queued (not yet applied)", text)
	}
	eventually(t, "the replayed order o-dead to be applied", func() bool {
		in, err := loadInstance(b, "o-dead")
		return err == nil && in != nil && in.State == "AwaitingPayment"
	})
	run(t, ctx, "replayed saga", chromedp.Navigate(base+"/instances/order/o-dead"), chromedp.WaitVisible("#journal li"), chromedp.Text("#journal", &text))
	if !strings.Contains(text, "AwaitingPayment") {
		t.Errorf("journal of the replayed o-dead: %q", text)
	}
	// Its dead letter stays, with the replay's outcome.
	run(t, ctx, "replay history", chromedp.Navigate(base+"/dead-letters/placed-o-dead"), chromedp.WaitVisible("#history"),
		chromedp.Poll(`document.querySelector("#history").innerText.includes("succeeded")`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text("#history", &text))
	if !strings.Contains(text, "replayed once") || !strings.Contains(text, "first failure") {
		t.Errorf("history of placed-o-dead: %q, want the first failure and one replay that succeeded", text)
	}
	screenshot(t, ctx, "dead-letter-history")

	// A hostile key renders as text and runs nothing.
	run(t, ctx, "hostile key", chromedp.Navigate(base+"/instances/order/"+url.PathEscape(hostileKey)), chromedp.WaitVisible("#saga-key"), chromedp.Text("#saga-key", &text))
	if text != hostileKey {
		t.Errorf("hostile key shown as %q, want the text %q", text, hostileKey)
	}
	run(t, ctx, "hostile list", chromedp.Navigate(base+"/instances?prefix=%3C"), chromedp.WaitVisible("#instances"), chromedp.Text("#instances", &text))
	if !strings.Contains(text, hostileKey) {
		t.Errorf("instances list lacks the hostile key as text: %q", text)
	}
	if dialog.Load() {
		t.Error("a JavaScript dialog opened: a hostile key ran as script")
	}

	// A long state beside the status badge, and many attributes at 1400 px.
	key := url.PathEscape(jobKey)
	run(t, ctx, "long state", chromedp.EmulateViewport(1400, 900), chromedp.Navigate(base+"/instances/ingest-job/"+key), chromedp.WaitVisible("#saga-state"))
	var overlap struct {
		State, Badge [4]float64
	}
	run(t, ctx, "state and badge boxes", chromedp.Evaluate(`(() => {
		const box = r => [r.left, r.top, r.right, r.bottom];
		const text = document.createRange();
		text.selectNodeContents(document.querySelector("#saga-state"));
		return {State: box(text.getBoundingClientRect()), Badge: box(document.querySelector("#saga-status .pill").getBoundingClientRect())};
	})()`, &overlap))
	if s, b := overlap.State, overlap.Badge; s[0] < b[2] && b[0] < s[2] && s[1] < b[3] && b[1] < s[3] {
		t.Errorf("the state PartiallySucceeded (box %v) runs under the status badge (box %v)", s, b)
	}
	screenshot(t, ctx, "instance-long-state")
	run(t, ctx, "wide instances", chromedp.Navigate(base+"/instances"), chromedp.WaitVisible("#instances"))
	var fit struct {
		Right, Viewport, ScrollWidth, ClientWidth float64
	}
	run(t, ctx, "attributes column", chromedp.Evaluate(`(() => {
		const th = document.querySelector("#instances thead th:last-child"), wrap = document.querySelector("#instances").closest(".scroll");
		return {Right: th.getBoundingClientRect().right, Viewport: document.documentElement.clientWidth, ScrollWidth: wrap.scrollWidth, ClientWidth: wrap.clientWidth};
	})()`, &fit))
	if fit.Right > fit.Viewport || fit.ScrollWidth > fit.ClientWidth {
		t.Errorf("at 1400 px the Attributes column ends at %.0f px (viewport %.0f), the table is %.0f px wide in %.0f px: cut off", fit.Right, fit.Viewport, fit.ScrollWidth, fit.ClientWidth)
	}
	screenshot(t, ctx, "instances-1400")
	run(t, ctx, "reset viewport", chromedp.EmulateReset())

	// Dark mode.
	run(t, ctx, "dark", emulation.SetEmulatedMedia().WithFeatures([]*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: "dark"}}),
		chromedp.Navigate(base+"/sagas"), chromedp.WaitVisible(".diagram svg .node"))
	screenshot(t, ctx, "saga-types-dark")
}

func TestBrowserLogin(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{Token: "browser-token-0123456789"})
	ctx, _ := chrome(t)
	var text string
	run(t, ctx, "login form", chromedp.Navigate(b.srv.URL+"/sagas"), chromedp.WaitVisible(`input[name="token"]`))
	screenshot(t, ctx, "login")
	run(t, ctx, "sign in", chromedp.SendKeys(`input[name="token"]`, "browser-token-0123456789"), chromedp.Submit(`input[name="token"]`),
		chromedp.WaitVisible(".saga-type"), chromedp.Text("h1", &text))
	if text != "Saga types" {
		t.Errorf("after sign-in: heading %q, want the page asked for first (Saga types)", text)
	}
	var cookies string
	run(t, ctx, "cookie", chromedp.Evaluate(`document.cookie`, &cookies))
	if strings.Contains(cookies, "idem_session") {
		t.Error("the session cookie is readable from script: want HttpOnly")
	}
}

// loadInstance loads the order saga key; nil when there is none.
func loadInstance(b *bundle, key string) (*store.Instance, error) {
	return loadSaga(b, store.Key{SagaType: "order", Key: key})
}

// loadSaga loads the saga k; nil when there is none.
func loadSaga(b *bundle, k store.Key) (*store.Instance, error) {
	ctx := context.Background()
	uow, err := b.st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = uow.Rollback(ctx) }()
	res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
	if err != nil {
		return nil, err
	}
	return res.Instances[k], nil
}

// jobKey is the key of the ingest job seedJob applies.
const jobKey = "job-2026-11-25-eu-0001"

type (
	job        struct{ Customer, Source, Region, Batch, Owner string }
	jobStarted struct{ ID, Customer, Source, Region, Batch, Owner string }
)

// jobMachine has a long final state name and five attributes, as the
// ingestor example has, to exercise the layout.
func jobMachine() *saga.Machine[job] {
	m := saga.New[job]("ingest-job")
	partial := m.Final("PartiallySucceeded")
	started := saga.NewEvent[jobStarted](m, func(e jobStarted) string { return e.ID })
	m.Initially(saga.When(started).Then(func(c *saga.Context[job], e jobStarted) error {
		*c.Data = job{Customer: e.Customer, Source: e.Source, Region: e.Region, Batch: e.Batch, Owner: e.Owner}
		return nil
	}).TransitionTo(partial))
	m.Attribute("customer", func(j job) string { return j.Customer })
	m.Attribute("source_file", func(j job) string { return j.Source })
	m.Attribute("region", func(j job) string { return j.Region })
	m.Attribute("batch", func(j job) string { return j.Batch })
	m.Attribute("owner", func(j job) string { return j.Owner })
	return m
}

func seedJob(t *testing.T, b *bundle) {
	t.Helper()
	env, err := b.e.NewEnvelope("started-"+jobKey, jobStarted{ID: jobKey, Customer: "Müller Logistik GmbH & Co. KG",
		Source: "s3://ingest-eu-central-1/2026/11/25/reference-prices-full-export.csv", Region: "eu-central-1",
		Batch: "B-2026-11-25-0001", Owner: "pricing-operations@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.e.PublishAndWait(context.Background(), env); err != nil {
		t.Fatalf("apply %s: %v", jobKey, err)
	}
}

package admin_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store"
)

// errorShown waits until the page shows msg (the boosted form's answer
// was an error page), and reads the page's heading, its address and the
// status htmx:responseError reported (0: none).
func errorShown(t *testing.T, ctx context.Context, what, msg string) (heading, path string, status int) {
	t.Helper()
	run(t, ctx, what, chromedp.Poll(`document.querySelector("main").innerText.includes(`+jsString(msg)+`)`, nil, chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text("main h1", &heading), chromedp.Evaluate(`location.pathname`, &path), chromedp.Evaluate(`window.idemResponseError || 0`, &status))
	return heading, path, status
}

// watchErrors records in the page the status of the answer htmx reports
// with htmx:responseError on the form of the button sel (htmx fires it on
// the form once the answer replaced it: it no longer reaches the body).
func watchErrors(sel string) chromedp.Action {
	return chromedp.Evaluate(`document.querySelector(`+jsString(sel)+`).form.addEventListener("htmx:responseError", e => { window.idemResponseError = e.detail.xhr.status; })`, nil)
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return "`" + strings.NewReplacer("\\", "\\\\", "`", "\\`", "$", "\\$").Replace(s) + "`"
}

// A boosted form the server refuses with an error page shows that page,
// its message saying what to do: ending a saga that finished between the
// question and the confirmation (409), and replaying a dead letter another
// operator replayed meanwhile (409). The address stays the page's own
// (never the action's, which has no page), and htmx still treats the
// answer as an error.
func TestBrowserRefusedFormShowsError(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	ctx, _ := chrome(t)
	base := b.srv.URL

	// End o-2: the question is asked, then the order is paid and ships.
	run(t, ctx, "end question", chromedp.Navigate(base+"/instances/order/o-2"), chromedp.WaitVisible("#end-form"),
		chromedp.SetValue("#end-reason", "customer cancelled"), click("#end-submit"), chromedp.WaitVisible("#confirm-action"), watchErrors("#confirm-action-yes"))
	pay, err := b.e.NewEnvelope("paid-o-2", orders.PaymentReceived{OrderID: "o-2", Amount: 7})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.e.PublishAndWait(context.Background(), pay); err != nil {
		t.Fatalf("pay o-2: %v", err)
	}
	run(t, ctx, "confirm end", click("#confirm-action-yes"))
	heading, path, status := errorShown(t, ctx, "the end's refusal", "has finished already: there is nothing to end")
	if heading != "Conflict" || status != 409 {
		t.Errorf("after ending a saga that finished meanwhile: heading %q, htmx:responseError status %d; want Conflict, 409", heading, status)
	}
	if path != "/instances/order/o-2" {
		t.Errorf("after the refused end the address is %q; want the saga's page /instances/order/o-2", path)
	}
	screenshot(t, ctx, "refused-end")
	var state string
	run(t, ctx, "reload after the refusal", chromedp.Reload(), chromedp.WaitVisible("#saga-state"), chromedp.Text("#saga-state", &state))
	if state != "Shipped" {
		t.Errorf("reloading after the refused end shows state %q; want o-2's page, Shipped", state)
	}
	if in, _ := loadInstance(b, "o-2"); in.State != "Shipped" {
		t.Errorf("o-2 after the refused end: %q; want Shipped", in.State)
	}

	// Replay placed-o-dead from a page that still offers it (live updates
	// off, so the page keeps its button) after it was replayed elsewhere.
	run(t, ctx, "live off", chromedp.Evaluate(`localStorage.setItem("idem.live", "off")`, nil),
		chromedp.Navigate(base+"/dead-letters/placed-o-dead"), chromedp.WaitVisible(`button[data-action="replay"]`), watchErrors(`button[data-action="replay"]`))
	if err := b.e.ReplayDeadLetter(context.Background(), "placed-o-dead"); err != nil {
		t.Fatalf("replay placed-o-dead: %v", err)
	}
	eventually(t, "the replay of placed-o-dead to succeed", func() bool {
		d, err := b.st.GetDeadLetter(context.Background(), "placed-o-dead")
		return err == nil && d.LastReplay() != nil && d.LastReplay().Outcome == store.ReplaySucceeded
	})
	run(t, ctx, "replay again", click(`button[data-action="replay"]`))
	heading, path, status = errorShown(t, ctx, "the replay's refusal", "Not replayed: its latest replay succeeded")
	if heading != "Conflict" || status != 409 {
		t.Errorf("after replaying a dead letter replayed meanwhile: heading %q, htmx:responseError status %d; want Conflict, 409", heading, status)
	}
	if path != "/dead-letters/placed-o-dead" {
		t.Errorf("after the refused replay the address is %q; want the dead letter's page", path)
	}
	screenshot(t, ctx, "refused-replay")
}

// A live refresh answered with an error page (503: the store did not
// answer) is not an action's answer: the page keeps what it showed and
// the indicator says it is stale. Live refreshes go through fetch, not
// htmx, so the htmx-config that swaps error pages in does not reach them.
func TestBrowserLiveErrorKeepsPage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	ctx, _ := chrome(t)
	run(t, ctx, "instance", chromedp.Navigate(b.srv.URL+"/instances/order/o-1"), chromedp.WaitVisible("#journal li"),
		livePoll(`document.querySelector("#live-toggle").dataset.state === "live"`))
	// From now on the page's refreshes are answered as a store outage
	// answers them: a 503 with the error page's content.
	page := base64.StdEncoding.EncodeToString([]byte(`<section class="card narrow"><h1>Service Unavailable</h1><p>The store did not answer (load saga). See the server log, then reload.</p></section>`))
	chromedp.ListenTarget(ctx, func(ev any) {
		if p, ok := ev.(*fetch.EventRequestPaused); ok {
			go func() {
				_ = chromedp.Run(ctx, fetch.FulfillRequest(p.RequestID, 503).WithResponsePhrase("Service Unavailable").WithBody(page).
					WithResponseHeaders([]*fetch.HeaderEntry{{Name: "Content-Type", Value: "text/html; charset=utf-8"}}))
			}()
		}
	})
	run(t, ctx, "refuse refreshes", fetch.Enable().WithPatterns([]*fetch.RequestPattern{{URLPattern: "*/instances/order/o-1", ResourceType: network.ResourceTypeFetch}}))
	var text, key, main string
	run(t, ctx, "stale", livePoll(`document.querySelector("#live-toggle").dataset.state === "stale"`), chromedp.Text("#live-toggle", &text),
		chromedp.Text("#saga-key", &key), chromedp.Evaluate(`document.querySelector("main").innerText`, &main))
	if !strings.Contains(text, "(HTTP 503") {
		t.Errorf("indicator after a refresh answered 503: %q; want stale since hh:mm:ss (HTTP 503 ...)", text)
	}
	if key != "o-1" || strings.Contains(main, "The store did not answer") {
		t.Errorf("after a refresh answered 503 the page shows key %q and:\n%s\nwant o-1's page as it was, without the error page", key, main)
	}
}

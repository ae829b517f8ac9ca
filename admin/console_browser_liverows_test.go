package admin_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem/admin"
)

// livePoll waits up to 30 s for the page's expression to hold.
func livePoll(expr string) chromedp.Action {
	return chromedp.Poll(expr, nil, chromedp.WithPollingTimeout(30*time.Second))
}

// A dead letter that sorts in before the row under the operator's action
// leaves that action on its own row: the refresh matches rows by id, and
// every row id is valid and unique, hostile IDs included.
func TestBrowserLiveRowsKeepTheirItem(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	now := time.Now().Add(-time.Minute)
	hostile := "m-<script>alert(1)</script>\"'"
	record(t, b, unknownType("m-b", now), unknownType(hostile, now))
	ctx, dialog := chrome(t)
	var ok bool
	run(t, ctx, "dead letters", chromedp.Navigate(b.srv.URL+"/dead-letters"), chromedp.WaitVisible(`tr[data-id="m-b"] button[data-action="replay"]`),
		chromedp.Evaluate(`window.held = document.querySelector('tr[data-id="m-b"] button[data-action="replay"]'), true`, &ok))
	from := liveTicks(t, ctx)
	record(t, b, unknownType("m-a", now)) // sorts before m-b
	run(t, ctx, "the new row", livePoll(`[...document.querySelectorAll("tbody tr[data-id]")].some(tr => tr.dataset.id === "m-a")`),
		livePoll(fmt.Sprintf(`Number(document.querySelector("#main").dataset.liveTicks) >= %d`, from+1)))
	var held struct {
		Attached bool
		Row      string
		Action   string
	}
	run(t, ctx, "the held button", chromedp.Evaluate(`({Attached: document.contains(window.held), Row: window.held.closest("tr").dataset.id, Action: window.held.form.getAttribute("action")})`, &held))
	if !held.Attached || held.Row != "m-b" || !strings.HasSuffix(held.Action, "/dead-letters/m-b/replay") {
		t.Errorf("after m-a sorted in, the Replay button that was m-b's is attached=%v, in row %q, posting to %q: want it still m-b's", held.Attached, held.Row, held.Action)
	}
	var ids []string
	run(t, ctx, "row ids", chromedp.Evaluate(`[...document.querySelectorAll("tbody tr[data-id]")].map(tr => tr.id)`, &ids))
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] || !strings.HasPrefix(id, "row-dl-") || strings.ContainsAny(id, "<>\"' ") {
			t.Errorf("row id %q: want a unique id derived from the dead letter's ID, with none of its text (all: %q)", id, ids)
		}
		seen[id] = true
	}
	if len(ids) != 3 {
		t.Errorf("rows with ids: %q, want 3", ids)
	}

	// The pointer on a row's actions pauses the page.
	var box []float64
	run(t, ctx, "button box", chromedp.Evaluate(`(() => { window.held.scrollIntoView({block: "center"}); const r = window.held.getBoundingClientRect(); return [r.left + r.width/2, r.top + r.height/2]; })()`, &box))
	run(t, ctx, "hover", chromedp.MouseEvent(input.MouseMoved, box[0], box[1]),
		livePoll(`document.querySelector("#live-toggle").textContent.includes("paused: pointer on an action")`))
	run(t, ctx, "away", chromedp.MouseEvent(input.MouseMoved, 1, 1),
		livePoll(`document.querySelector("#live-toggle").dataset.state === "live"`))
	if dialog.Load() {
		t.Error("a JavaScript dialog opened: a hostile ID ran as script")
	}
}

// A refresh that fails says since when the page is stale and why, and
// backs off; one the session no longer allows goes to the login page.
func TestBrowserLiveStale(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	ctx, _ := chrome(t)
	var text string
	run(t, ctx, "instances", chromedp.Navigate(b.srv.URL+"/instances"), chromedp.WaitVisible("#instances"),
		livePoll(`document.querySelector("#live-toggle").dataset.state === "live"`))
	b.srv.CloseClientConnections()
	b.srv.Close()
	run(t, ctx, "stale", livePoll(`document.querySelector("#live-toggle").dataset.state === "stale"`), chromedp.Text("#live-toggle", &text))
	if !strings.Contains(text, "stale since ") || !strings.Contains(text, "(no answer)") {
		t.Errorf("indicator after the server went away: %q, want stale since hh:mm:ss (no answer)", text)
	}
	var delays []int
	run(t, ctx, "backoff", livePoll(`Number(document.querySelector("#main").dataset.liveFailures) >= 2`),
		chromedp.Evaluate(`[Number(document.querySelector("#main").dataset.live), Number(document.querySelector("#main").dataset.liveDelay)]`, &delays))
	if delays[1] <= delays[0] {
		t.Errorf("after two failed refreshes the next is due in %d s, the period is %d s: want it to back off", delays[1], delays[0])
	}
	screenshot(t, ctx, "live-stale")
}

// A refresh refused for an expired session follows the server's login
// redirect.
func TestBrowserLiveSignedOut(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{Token: "live-token-0123456789"})
	ctx, _ := chrome(t)
	run(t, ctx, "sign in", chromedp.Navigate(b.srv.URL+"/instances"), chromedp.WaitVisible(`input[name="token"]`),
		chromedp.SendKeys(`input[name="token"]`, "live-token-0123456789"), chromedp.Submit(`input[name="token"]`),
		chromedp.WaitVisible("#instances"), livePoll(`document.querySelector("#live-toggle").dataset.state === "live"`))
	var loc string
	run(t, ctx, "sign out", network.ClearBrowserCookies(), chromedp.WaitVisible(`input[name="token"]`), chromedp.Location(&loc))
	loc = strings.TrimPrefix(loc, b.srv.URL)
	if loc != "/login?next=%2Finstances" {
		t.Errorf("after the session ended the page went to %q, want the login page with next=/instances", loc)
	}
}

// A filter holding a newline (the field drops it) is not unsent input.
func TestBrowserLiveNewlineFilter(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	ctx, _ := chrome(t)
	var text string
	run(t, ctx, "filtered", chromedp.Navigate(b.srv.URL+"/dead-letters?key=a%0Ab"), chromedp.WaitVisible(`input[name="key"]`))
	if err := chromedp.Run(ctx, livePoll(`document.querySelector("#live-toggle").dataset.state === "live"`)); err != nil {
		run(t, ctx, "indicator", chromedp.Text("#live-toggle", &text))
		t.Errorf("a page filtered by a key with a newline is not live: indicator %q", text)
	}
}

// The Replicas page refreshes through the shared live mechanism: an open
// configuration stays open (the page waits), and it has no poll of its own.
func TestBrowserLiveReplicas(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	beatReplicas(t, b)
	ctx, _ := chrome(t)
	var text string
	var polls int
	run(t, ctx, "replicas", chromedp.Navigate(b.srv.URL+"/replicas"), chromedp.WaitVisible("details.config summary"),
		livePoll(`document.querySelector("#live-toggle").dataset.state === "live"`),
		chromedp.Evaluate(`document.querySelectorAll("[hx-trigger]").length`, &polls))
	if polls != 0 {
		t.Errorf("the replicas page has %d elements with their own htmx poll, want none", polls)
	}
	run(t, ctx, "open the configuration", click("details.config summary"))
	from := liveTicks(t, ctx)
	var open bool
	run(t, ctx, "two ticks", livePoll(fmt.Sprintf(`Number(document.querySelector("#main").dataset.liveTicks) >= %d`, from+2)),
		chromedp.Evaluate(`document.querySelector("details.config").open`, &open), chromedp.Text("#live-toggle", &text))
	if !open || !strings.Contains(text, "paused: details open") {
		t.Errorf("after two ticks the configuration is open=%v, indicator %q: want it open and the page waiting", open, text)
	}
}

package admin_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
)

// fireSchedule advances schedule name past its next tick, as the engine's
// poller does when it fires it: the tick becomes its LastTick.
func fireSchedule(t *testing.T, b *bundle, name string) time.Time {
	t.Helper()
	ctx := context.Background()
	s, err := b.st.GetSchedule(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	uow, err := b.st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	adv := []store.ScheduleAdvance{{Name: name, From: s.NextDue, To: s.NextDue.Add(time.Hour), Fired: s.NextDue}}
	if err := uow.(store.ScheduleUnitOfWork).AdvanceSchedules(ctx, adv); err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{}); err != nil {
		t.Fatal(err)
	}
	return s.NextDue
}

func schedulePaused(t *testing.T, b *bundle, name string) bool {
	t.Helper()
	s, err := b.st.GetSchedule(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s.Paused
}

// scheduleRow returns the table row of the page for schedule name.
func scheduleRow(t *testing.T, page, name string) string {
	t.Helper()
	for _, row := range strings.Split(page, "<tr") {
		if strings.Contains(row, `data-schedule="`+name+`"`) {
			return row
		}
	}
	t.Fatalf("no row of schedule %s in:\n%s", name, page)
	return ""
}

const consoleTime = "2006-01-02 15:04:05 MST"

// The schedules page lists each schedule with its next and last tick;
// pausing and resuming ask first, then change the stored flag.
func TestConsoleSchedules(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	saveSchedules(t, b.st, "nightly", "<script>x</script>")
	fired := fireSchedule(t, b, "nightly")
	next, err := b.st.GetSchedule(context.Background(), "nightly")
	if err != nil {
		t.Fatal(err)
	}
	br := newBrowser(t, b)
	code, page := br.get("/schedules")
	if code != http.StatusOK || !strings.Contains(page, `href="/schedules" aria-current="page"`) {
		t.Fatalf("GET /schedules: status %d, want 200 and the Schedules nav link current:\n%s", code, page)
	}
	row := scheduleRow(t, page, "nightly")
	for _, want := range []string{"@every 1h0m0s", "skip", "grace 1m0s", "report.Due", next.NextDue.UTC().Format(consoleTime), "from now",
		fired.UTC().Format(consoleTime), "running", `action="/schedules/pause"`} {
		if !strings.Contains(row, want) {
			t.Errorf("the row of nightly lacks %q:\n%s", want, row)
		}
	}
	if strings.Contains(page, "<script>x</script>") || !strings.Contains(page, "&lt;script&gt;x&lt;/script&gt;") {
		t.Errorf("the hostile schedule name is not escaped:\n%s", page)
	}
	if row := scheduleRow(t, page, "&lt;script&gt;x&lt;/script&gt;"); !strings.Contains(row, "never") {
		t.Errorf("a schedule that never fired does not say so:\n%s", row)
	}

	for _, step := range []struct {
		action, done string
		paused       bool
	}{{"pause", "paused", true}, {"resume", "resumed", false}} {
		form := url.Values{"name": {"nightly"}}
		resp, _ := br.post("/schedules/"+step.action, form)
		loc := resp.Header.Get("Location")
		if resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "confirm="+step.action) {
			t.Fatalf("%s without confirm: %d to %q, want 303 to the question", step.action, resp.StatusCode, loc)
		}
		if got := schedulePaused(t, b, "nightly"); got == step.paused {
			t.Fatalf("%s without confirm: paused %v, want it unchanged", step.action, got)
		}
		code, page := br.get(loc)
		if code != http.StatusOK || !strings.Contains(page, `id="confirm-schedule"`) || !strings.Contains(page, `name="confirm" value="yes"`) {
			t.Fatalf("GET %s: status %d, want 200 and a confirmation form:\n%s", loc, code, page)
		}
		form.Set("confirm", "yes")
		if resp, _ := br.post("/schedules/"+step.action, form, "Origin", "https://evil.example", "Sec-Fetch-Site", "cross-site"); resp.StatusCode != http.StatusForbidden {
			t.Errorf("cross-site %s: status %d, want 403", step.action, resp.StatusCode)
		}
		if got := schedulePaused(t, b, "nightly"); got == step.paused {
			t.Fatalf("after a cross-site %s: paused %v, want it unchanged", step.action, got)
		}
		resp, _ = br.post("/schedules/"+step.action, form)
		if loc := resp.Header.Get("Location"); resp.StatusCode != http.StatusSeeOther || !strings.Contains(loc, "done="+step.done) {
			t.Fatalf("confirmed %s: %d to %q, want 303 with done=%s", step.action, resp.StatusCode, loc, step.done)
		}
		if got := schedulePaused(t, b, "nightly"); got != step.paused {
			t.Errorf("after the confirmed %s: paused %v, want %v", step.action, got, step.paused)
		}
		_, page = br.get("/schedules?done=" + step.done + "&n=1")
		if !strings.Contains(page, "1 schedule "+step.done) {
			t.Errorf("after %s: no flash saying so", step.action)
		}
		if row := scheduleRow(t, page, "nightly"); strings.Contains(row, "paused") != step.paused {
			t.Errorf("after %s, the row of nightly:\n%s", step.action, row)
		}
	}

	for name, want := range map[string]int{"missing": http.StatusNotFound, "a\x00b": http.StatusBadRequest, "a\xffb": http.StatusBadRequest} {
		if resp, _ := br.post("/schedules/pause", url.Values{"name": {name}, "confirm": {"yes"}}); resp.StatusCode != want {
			t.Errorf("pause %q: status %d, want %d", name, resp.StatusCode, want)
		}
		if code, _ := br.get("/schedules?confirm=pause&name=" + url.QueryEscape(name)); code != want {
			t.Errorf("the question about %q: status %d, want %d", name, code, want)
		}
	}
}

// A read-only console shows schedules, and neither asks about nor makes a
// change.
func TestConsoleSchedulesReadOnly(t *testing.T) {
	t.Parallel()
	b := setup(t, &admin.Config{ReadOnly: true})
	saveSchedules(t, b.st, "nightly")
	br := newBrowser(t, b)
	code, page := br.get("/schedules")
	if code != http.StatusOK || !strings.Contains(page, "read-only") || !strings.Contains(page, "nightly") {
		t.Fatalf("GET /schedules in read-only mode: status %d, want 200 with the badge and the schedule:\n%s", code, page)
	}
	if strings.Contains(page, `method="post"`) {
		t.Errorf("GET /schedules in read-only mode shows a mutating form:\n%s", page)
	}
	if code, _ := br.get("/schedules?confirm=pause&name=nightly"); code != http.StatusForbidden {
		t.Errorf("the pause question in read-only mode: status %d, want 403", code)
	}
	for _, action := range []string{"pause", "resume"} {
		if resp, _ := br.post("/schedules/"+action, url.Values{"name": {"nightly"}, "confirm": {"yes"}}); resp.StatusCode != http.StatusForbidden {
			t.Errorf("confirmed %s in read-only mode: status %d, want 403", action, resp.StatusCode)
		}
	}
	if schedulePaused(t, b, "nightly") {
		t.Error("read-only: the schedule was paused")
	}
}

// In a browser: open the page, pause a schedule, confirm.
func TestBrowserSchedules(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	saveSchedules(t, b.st, "nightly")
	ctx, _ := chrome(t)
	var text string
	run(t, ctx, "schedules", chromedp.Navigate(b.srv.URL+"/schedules"), chromedp.WaitVisible(`tr[data-schedule="nightly"] button[data-action="pause"]`))
	screenshot(t, ctx, "schedules")
	run(t, ctx, "pause", click(`tr[data-schedule="nightly"] button[data-action="pause"]`), chromedp.WaitVisible("#confirm-schedule-yes"))
	if schedulePaused(t, b, "nightly") {
		t.Fatal("pause clicked, not confirmed: the schedule is paused")
	}
	screenshot(t, ctx, "schedule-pause-confirm")
	run(t, ctx, "confirm pause", click("#confirm-schedule-yes"), chromedp.WaitVisible(".flash"),
		chromedp.Text(`tr[data-schedule="nightly"]`, &text))
	if !strings.Contains(text, "paused") {
		t.Errorf("the row after pausing: %q, want paused", text)
	}
	if !schedulePaused(t, b, "nightly") {
		t.Error("after the confirmed pause in the browser: the schedule is not paused")
	}

	// Fire now: asked first, then the next tick is sent and the schedule
	// moves on, still paused.
	before, err := b.st.GetSchedule(t.Context(), "nightly")
	if err != nil {
		t.Fatal(err)
	}
	run(t, ctx, "fire", click(`tr[data-schedule="nightly"] button[data-action="fire"]`), chromedp.WaitVisible("#confirm-schedule-yes"),
		chromedp.Text("#confirm-title", &text))
	if !strings.Contains(text, "Fire now") {
		t.Errorf("the fire question: %q", text)
	}
	if s, _ := b.st.GetSchedule(t.Context(), "nightly"); !s.LastTick.Equal(before.LastTick) {
		t.Fatal("fire clicked, not confirmed: the schedule fired")
	}
	screenshot(t, ctx, "schedule-fire-confirm")
	run(t, ctx, "confirm fire", click("#confirm-schedule-yes"), chromedp.WaitVisible(".flash"), chromedp.Text(".flash", &text))
	if !strings.Contains(text, "fired") {
		t.Errorf("the flash after fire: %q", text)
	}
	after, err := b.st.GetSchedule(t.Context(), "nightly")
	if err != nil || !after.LastTick.Equal(before.NextDue) || !after.Paused {
		t.Errorf("after fire in the browser: %+v, %v; want last tick %s, still paused", after, err, before.NextDue)
	}
	var last string
	run(t, ctx, "last fired", chromedp.Text(`tr[data-schedule="nightly"] td.last-fired`, &last))
	if strings.Contains(last, "from now") || !strings.Contains(last, "fired early") {
		t.Errorf("Last fired after fire now: %q, want the tick fired early, not a time from now", last)
	}
	run(t, ctx, "resume", click(`tr[data-schedule="nightly"] button[data-action="resume"]`), chromedp.WaitVisible("#confirm-schedule-yes"),
		click("#confirm-schedule-yes"), chromedp.WaitVisible(".flash"), chromedp.Text(`tr[data-schedule="nightly"]`, &text))
	if !strings.Contains(text, "running") || schedulePaused(t, b, "nightly") {
		t.Errorf("after the confirmed resume in the browser: row %q, paused %v; want running", text, schedulePaused(t, b, "nightly"))
	}
}

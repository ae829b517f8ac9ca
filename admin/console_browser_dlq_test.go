package admin_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem/store"
)

// TestBrowserDeadLetterTriage: on the SQLite harness, a group of dead
// letters that failed alike is retried from its row (through the counted
// confirmation), its replays fail again and the history shows it; the
// group is then archived with the checkboxes, leaves the list, and one of
// it is restored.
func TestBrowserDeadLetterTriage(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seedTriage(t, b)
	fp := store.Fingerprint("handler_failed", "charge order 1: card declined")
	ctx, dialog := chrome(t)
	base := b.srv.URL
	row := `#groups tr.group[data-fingerprint="` + fp + `"]`

	var text string
	run(t, ctx, "groups", chromedp.Navigate(base+"/dead-letters"), chromedp.WaitVisible(row), chromedp.Text(row, &text))
	if !strings.Contains(text, "charge order #: card declined") || !strings.Contains(text, "3") || !strings.Contains(text, "handler_failed") {
		t.Errorf("declined group row: %q, want its pattern, reason and count 3", text)
	}
	screenshot(t, ctx, "dead-letter-groups")

	// Retry the group: the confirmation counts it first.
	run(t, ctx, "retry group", click(row+` button[data-action="retry-group"]`), chromedp.WaitVisible("#confirm-bulk"), chromedp.Text("#confirm-title", &text))
	if !strings.Contains(text, "Replay 3 dead letter") {
		t.Errorf("retry group confirmation: %q, want the count 3", text)
	}
	run(t, ctx, "confirm retry", click("#confirm-bulk"), chromedp.WaitVisible(".flash"), chromedp.Text(".flash", &text))
	if !strings.Contains(text, "3 dead letter(s) re-queued") {
		t.Errorf("flash after the group retry: %q, want 3 re-queued", text)
	}
	// Nothing consumes billing.ChargeCard: each replay fails again.
	eventually(t, "the three replays to fail again", func() bool {
		for _, id := range []string{"ch-1", "ch-2", "ch-3"} {
			d, err := b.st.GetDeadLetter(t.Context(), id)
			if err != nil || d.LastReplay() == nil || d.LastReplay().Outcome != store.ReplayFailed {
				return false
			}
		}
		return true
	})
	run(t, ctx, "replay history", chromedp.Navigate(base+"/dead-letters/ch-1"), chromedp.WaitVisible("#history table.replays"), chromedp.Text("#history", &text))
	if !strings.Contains(text, "first failure") || !strings.Contains(text, "replayed") || !strings.Contains(text, "failed again") || !strings.Contains(text, "unknown_type") || !strings.Contains(text, "by console") {
		t.Errorf("history of ch-1: %q, want the first failure and a replay by console that failed again with unknown_type", text)
	}
	screenshot(t, ctx, "dead-letter-replays")

	// Its group changed (the replays failed with unknown_type): the list
	// of the fingerprint they fail with now shows the outcome.
	d, err := b.st.GetDeadLetter(t.Context(), "ch-1")
	if err != nil {
		t.Fatal(err)
	}
	newFP := d.Fingerprint
	if want := store.Fingerprint("unknown_type", `no saga or handler consumes message type "billing.X"`); newFP != want {
		t.Errorf("ch-1 failed again with %q: fingerprint %s, want %s (unknown_type, the type masked)", d.Error, newFP, want)
	}
	run(t, ctx, "latest replay in the list", chromedp.Navigate(base+"/dead-letters?fingerprint="+newFP), chromedp.WaitVisible(`tr[data-id="ch-1"]`),
		chromedp.Text(`tr[data-id="ch-1"] .replay-outcome`, &text))
	if !strings.Contains(text, "failed again") {
		t.Errorf("latest replay of ch-1 in the list: %q, want failed again", text)
	}

	// Archive the three with the checkboxes.
	var ids []string
	run(t, ctx, "select", chromedp.Evaluate(`[...document.querySelectorAll('input[type=checkbox][name=id]')].map(c => c.value)`, &ids))
	if strings.Join(ids, ",") != "ch-1,ch-2,ch-3" {
		t.Fatalf("rows of the group: %v, want ch-1, ch-2, ch-3", ids)
	}
	for _, id := range ids {
		run(t, ctx, "tick "+id, click(`tr[data-id="`+id+`"] input[type=checkbox]`))
	}
	run(t, ctx, "archive selected", click(`button[data-action="archive-selected"]`), chromedp.WaitVisible("#confirm-selected"), chromedp.Text("#confirm-title", &text))
	if !strings.Contains(text, "Archive 3 selected") {
		t.Errorf("archive confirmation: %q, want 3 selected", text)
	}
	screenshot(t, ctx, "dead-letters-archive-confirm")
	run(t, ctx, "confirm archive", click("#confirm-selected"), chromedp.WaitVisible(".flash"), chromedp.Text(".flash", &text))
	if !strings.Contains(text, "3 dead letter(s) archived") {
		t.Errorf("flash after archiving: %q, want 3 archived", text)
	}
	run(t, ctx, "list without them", chromedp.Navigate(base+"/dead-letters?state=all"), chromedp.WaitVisible("table.deadletters"), chromedp.Text("table.deadletters", &text))
	if strings.Contains(text, "ch-1") {
		t.Errorf("default list after archiving: %q, want ch-1 gone", text)
	}

	// Restore one from the archived list.
	run(t, ctx, "archived list", chromedp.Navigate(base+"/dead-letters?archived=only&state=all"), chromedp.WaitVisible(`tr[data-id="ch-2"]`),
		click(`tr[data-id="ch-2"] input[type=checkbox]`), click(`button[data-action="restore-selected"]`),
		chromedp.WaitVisible("#confirm-selected"), click("#confirm-selected"), chromedp.WaitVisible(".flash"), chromedp.Text(".flash", &text))
	if !strings.Contains(text, "1 dead letter(s) restored") {
		t.Errorf("flash after restoring: %q, want 1 restored", text)
	}
	run(t, ctx, "restored in the list", chromedp.Navigate(base+"/dead-letters?state=all"), chromedp.WaitVisible(`tr[data-id="ch-2"]`), chromedp.Text("table.deadletters", &text))
	if strings.Contains(text, "ch-1") || strings.Contains(text, "ch-3") {
		t.Errorf("default list after restoring ch-2: %q, want ch-1 and ch-3 still archived", text)
	}
	run(t, ctx, "restored letter", chromedp.Navigate(base+"/dead-letters/ch-2"), chromedp.WaitVisible("#archived"), chromedp.Text("#archived", &text))
	if strings.TrimSpace(text) != "no" {
		t.Errorf("ch-2's page after restoring: archived %q, want no", text)
	}
	screenshot(t, ctx, "dead-letter-restored")
	if dialog.Load() {
		t.Error("a JavaScript dialog opened")
	}
}

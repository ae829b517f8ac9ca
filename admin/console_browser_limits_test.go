package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem/store"
)

// In a browser at 1,400 px: the Limits page lists a limit in use (its
// counters, one at its cap, and a 200-byte key) within its card, hostile
// names and keys as text; overriding the cap asks first, then changes
// what is in force; and a slot taken meanwhile shows without a reload.
func TestBrowserLimits(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	lim := limiterOf(t, b)
	seedLimits(t, lim)
	longKey := "tenant-" + strings.Repeat("0123456789", 19) + "abc" // 200 bytes
	admit(t, lim, "h-long", longKey)
	ctx, dialog := chrome(t)
	row := `tr[data-limit="parser-api"]`

	var text string
	run(t, ctx, "limits page", chromedp.EmulateViewport(1400, 900), chromedp.Navigate(b.srv.URL+"/limits"),
		chromedp.WaitVisible(row), chromedp.Text(row, &text))
	for _, want := range []string{"2 at once, 20/s (burst 5)", "tenant-a", "at cap", "4"} {
		if !strings.Contains(text, want) {
			t.Errorf("parser-api's row: %q, want %q in it", text, want)
		}
	}
	run(t, ctx, "hostile row", chromedp.Text("#limits", &text))
	if !strings.Contains(text, hostileLimit) || !strings.Contains(text, hostileTenant) {
		t.Errorf("the limits table: %q, want the hostile limit and key as text", text)
	}
	if strings.Contains(text, "not declared by a running engine") {
		t.Errorf("the limits table: %q, want no declaration made just now marked as not declared by a running engine", text)
	}
	pageFits(t, ctx, "limits", "table.limits", "table.limits .counter", "table.limits .actions")
	screenshot(t, ctx, "limits")

	run(t, ctx, "change form", click(row+` a[data-action="edit"]`), chromedp.WaitVisible("#limit-form"),
		chromedp.SetValue("#limit-concurrency", "5"), click("#limit-set"), chromedp.WaitVisible("#confirm-limit"),
		chromedp.Text("#confirm-to", &text))
	if text != "5 at once, 20/s (burst 5)" {
		t.Errorf("the question's values after: %q, want 5 at once, 20/s (burst 5)", text)
	}
	if over, _ := lim.Limits(context.Background()); len(over) != 0 {
		t.Errorf("the question changed the store already: %+v", over)
	}
	screenshot(t, ctx, "limits-confirm")
	run(t, ctx, "confirm", click("#confirm-limit-yes"),
		chromedp.WaitVisible(`.flash[role="status"]`), chromedp.Text(row+" td.in-force", &text))
	if text != "5 at once, 20/s (burst 5)" {
		t.Errorf("in force after the override: %q, want 5 at once, 20/s (burst 5)", text)
	}
	run(t, ctx, "no cap reached", chromedp.Text(row, &text))
	if strings.Contains(text, "at cap") {
		t.Errorf("after raising the cap to 5 a counter still shows at cap: %q", text)
	}

	// No reload: the page polls, and a slot taken meanwhile shows.
	admit(t, lim, "h-4", "tenant-a")
	run(t, ctx, "live in flight", chromedp.Poll(`document.querySelector('`+row+` td.in-flight').innerText.trim() === "5"`, nil, chromedp.WithPollingTimeout(15*time.Second)))
	pageFits(t, ctx, "limits after the set", "table.limits", "table.limits .counter")
	screenshot(t, ctx, "limits-set")
	if dialog.Load() {
		t.Error("a JavaScript dialog opened")
	}
}

// admit takes a slot of parser-api's counter key for holder, for an hour,
// under a cap of 5 and parser-api's declared rate.
func admit(t *testing.T, lim store.Limiter, holder, key string) {
	t.Helper()
	in := map[string]store.Limit{"parser-api": {Name: "parser-api", Concurrency: 5, Rate: 20, Burst: 5}}
	got, err := lim.Admit(context.Background(), &store.AdmitParams{Limits: in, TTL: time.Hour,
		Requests: []store.AdmitRequest{{Holder: holder, Keys: []store.LimitKey{{Name: "parser-api", Key: key}}}}})
	if err != nil || !got[0].Admitted {
		t.Fatalf("admit %s on %s: %+v %v", holder, key, got, err)
	}
}

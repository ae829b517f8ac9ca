package admin_test

import (
	"strings"
	"testing"

	"github.com/chromedp/chromedp"

	"github.com/idemhq/idem/saga"
)

// A history entry opens to its payload, its diff and the messages it
// emitted, on SQLite and on PostgreSQL.
func TestBrowserHistory(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"sqlite", "postgres"} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			b := setupHistory(t, backend, 0)
			applyTicket(t, b, "open-t9", ticketOpened{ID: "t9", Title: "printer on fire", Note: "<script>alert(1)</script>"})
			applyTicket(t, b, "close-t9", ticketClosed{ID: "t9"})
			ctx, dialog := chrome(t)
			const entry = "#journal li:nth-child(2)"
			var closedText, detail string
			run(t, ctx, "instance page", chromedp.Navigate(b.srv.URL+"/instances/ticket/t9"), chromedp.WaitVisible(entry),
				chromedp.Text(entry, &closedText))
			if strings.Contains(closedText, `"status"`) {
				t.Errorf("the entry's detail shows before it is opened:\n%s", closedText)
			}
			run(t, ctx, "open the entry", click(entry+" summary"), chromedp.WaitVisible(entry+" .diff table"),
				chromedp.Text(entry+" .entry-detail", &detail))
			for _, want := range []string{
				`"ID": "t9"`,                     // the payload, indented
				"replace", "/status", `"closed"`, // the diff as an operation
				saga.MessageType(ticketNotify{}), "sent", // the emitted message and its sent state
				"x-tenant", "acme",
			} {
				if !strings.Contains(detail, want) {
					t.Errorf("opened entry lacks %q:\n%s", want, detail)
				}
			}
			var first string
			run(t, ctx, "open the first entry", click("#journal li:nth-child(1) summary"), chromedp.WaitVisible("#journal li:nth-child(1) .payload pre"),
				chromedp.Text("#journal li:nth-child(1) .payload pre", &first))
			if !strings.Contains(first, `"Note": "<script>alert(1)</script>"`) {
				t.Errorf("first entry's payload: got %q, want the note as its text", first)
			}
			if dialog.Load() {
				t.Error("a JavaScript dialog opened: a payload ran as script")
			}
			var href string
			var ok bool
			run(t, ctx, "download link", chromedp.AttributeValue("#history-download", "href", &href, &ok))
			if !ok || !strings.HasSuffix(href, "/instances/ticket/t9/history.json") {
				t.Errorf("Download JSON link: href %q, want …/instances/ticket/t9/history.json", href)
			}
			if backend == "sqlite" {
				screenshot(t, ctx, "instance-history") // docs/console.md shows it
			}
		})
	}
}

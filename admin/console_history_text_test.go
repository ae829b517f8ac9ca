package admin_test

import (
	"io"
	"net/url"
	"strings"
	"testing"
)

// A reason with markup, ended from the console, shows in the journal as
// its text (escaped by the template, never as JSON's \u003c escapes), in
// the entry's summary line as well as in its payload; diff values too.
func TestJournalShowsDecodedText(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	seed(t, b)
	br := newBrowser(t, b)
	const reason = "cancel <b>now</b> & refund"
	if resp, _ := br.post("/instances/order/o-2/end", url.Values{"reason": {reason}, "version": {"1"}, "confirm": {"yes"}}); resp.StatusCode >= 400 {
		t.Fatalf("end: %d", resp.StatusCode)
	}
	resp, err := b.srv.Client().Get(b.srv.URL + "/instances/order/o-2")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	page := string(body)
	const shown = "cancel &lt;b&gt;now&lt;/b&gt; &amp; refund"
	if strings.Contains(page, `\u003c`) || strings.Contains(page, `\u0026`) {
		t.Errorf("the journal shows JSON escapes instead of the text")
	}
	if strings.Contains(page, "<b>now") {
		t.Errorf("the reason's markup is on the page unescaped")
	}
	i := strings.Index(page, `class="end-reason"`)
	if i < 0 || !strings.Contains(page[i:min(len(page), i+200)], shown) {
		t.Errorf("the journal's summary line lacks the reason %q", shown)
	}
	if strings.Count(page, shown) < 2 {
		t.Errorf("the reason %q shows %d times, want in the summary and the payload", shown, strings.Count(page, shown))
	}
}

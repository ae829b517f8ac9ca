package admin_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// What a dead letter shows of hostile or odd content: a right-to-left
// override in its error is neutralised (shown as [U+202E]); a body that
// is JSON in form but not UTF-8 is a hex dump, as the CLI shows it; a
// plain handler's dead letter says "plain handler", not idem.handler/….
func TestDeadLetterDisplay(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	now := time.Now().Add(-time.Minute)
	e := idem.Envelope{ID: "h-1", Type: "main.LedgerPost", Body: []byte("{\"a\":\"\xff\xfe\"}")}
	record(t, b, store.DeadLetter{ID: "h-1", Envelope: e, Reason: "permanent_error", Error: "post failed: \u202egnp.exe",
		SagaType: "idem.handler", Key: "main.LedgerPost", Attempts: 1, FirstFailedAt: now, LastFailedAt: now})
	br := newBrowser(t, b)
	for _, path := range []string{"/dead-letters", "/dead-letters/h-1"} {
		_, page := br.get(path)
		if strings.ContainsRune(page, '\u202e') || !strings.Contains(page, "[U+202E]gnp.exe") {
			t.Errorf("%s: the error's U+202E is not neutralised", path)
		}
		if strings.Contains(page, "idem.handler/") || !strings.Contains(page, "plain handler") {
			t.Errorf("%s: the Saga column shows idem.handler/…, want it to say plain handler", path)
		}
	}
	_, page := br.get("/dead-letters/h-1")
	if !strings.Contains(page, "binary, hex dump") || !strings.Contains(page, "7b 22 61 22 3a 22 ff fe  22 7d") {
		t.Errorf("a body that is not UTF-8 is not shown as a hex dump:\n%s", page)
	}
}

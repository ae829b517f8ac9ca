package admin_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/admin"
)

// A bulk replay that stops on a publish error answers with what it did
// before the failure, not a bare 500 that loses the count.
func TestBulkReplayFailureKeepsTheCounts(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	now := time.Now().UTC()
	bad := unknownType("inv-b", now)
	bad.Envelope.Type = "billing.Invoice\x00Sent" // the queue refuses to publish it
	record(t, b, unknownType("inv-a", now), bad, unknownType("inv-c", now))
	code, body := b.do(t, http.MethodPost, "/api/dead-letters/replay?reason=unknown_type", "")
	var res admin.BulkResult
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatalf("%d %s: %v", code, body, err)
	}
	if code != http.StatusInternalServerError || res.Done != 1 || res.Matched < 2 || res.Error == "" || !strings.Contains(res.Message, "1 dead letter(s) re-queued") {
		t.Errorf("replay with a refused envelope: %d %s; want 500 with done 1 (inv-a), matched, the error and the message", code, body)
	}
}

// The console's bulk replay says how many it re-queued before it stopped.
func TestConsoleBulkReplayFailureKeepsTheCount(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	now := time.Now().UTC()
	bad := unknownType("inv-b", now)
	bad.Envelope.Type = "billing.Invoice\x00Sent"
	record(t, b, unknownType("inv-a", now), bad)
	br := newBrowser(t, b)
	br.get("/dead-letters")
	resp, page := br.post("/dead-letters/bulk", url.Values{"action": {"replay"}, "confirm": {"yes"}, "reason": {"unknown_type"}})
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(page, "Stopped after 1 dead letter(s) replayed") {
		t.Errorf("console replay with a refused envelope: %d %q; want 500 saying 1 was replayed", resp.StatusCode, page)
	}
}

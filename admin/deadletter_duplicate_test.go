package admin_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// A replay settled "duplicate" (the replayed copy found its message
// applied by an earlier copy) says so in the API, the history line, and
// the console's pages, and not that the replay succeeded.
func TestDuplicateReplayShown(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	now := time.Now().UTC().Truncate(time.Second)
	record(t, b, unknownType("dup-1", now.Add(-time.Hour)))
	rp := b.st.(store.DeadLetterReplayer)
	ctx := context.Background()
	if err := rp.BeginReplay(ctx, "dup-1", now.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"dup-1"}, Outcome: store.ReplayDuplicate, At: now}); err != nil {
		t.Fatal(err)
	}

	code, body := b.do(t, http.MethodGet, "/api/dead-letters/dup-1", "")
	if code != http.StatusOK || !strings.Contains(body, `"outcome":"duplicate"`) || !strings.Contains(body, `"state":"resolved"`) {
		t.Errorf("GET /api/dead-letters/dup-1: %d %s; want the replay's outcome duplicate and the letter resolved", code, body)
	}
	d := getDeadLetter(t, b, "dup-1")
	if !strings.Contains(d.History, "duplicate") || !strings.Contains(d.History, "not applied: an earlier copy of this message was applied") || strings.Contains(d.History, "succeeded") {
		t.Errorf("history %q: want it to say the replay was a duplicate, not applied, and not that it succeeded", d.History)
	}

	br := newBrowser(t, b)
	_, page := br.get("/dead-letters/dup-1")
	for _, want := range []string{`<span class="pill done">duplicate</span>`, "not applied: an earlier copy of this message was applied"} {
		if !strings.Contains(page, want) {
			t.Errorf("dead letter page: want %q in the replay history", want)
		}
	}
	if strings.Contains(page, "succeeded") || strings.Contains(page, `data-action="replay"`) {
		t.Errorf("dead letter page: want neither 'succeeded' nor a Replay button for a letter resolved by a duplicate")
	}
	_, page = br.get("/dead-letters?state=all")
	if !strings.Contains(page, `<span class="pill done">duplicate</span>`) {
		t.Errorf("dead-letter list: want dup-1's latest replay shown as duplicate")
	}
}

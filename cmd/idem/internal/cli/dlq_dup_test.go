package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// idem dlq show says a replay settled "duplicate" was not applied, and
// not that it succeeded.
func TestDLQShowDuplicateReplay(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	st := b.open()
	seed(t, st, deadLetter("dup1", "permanent_error", time.Hour))
	replayed(t, st, "dup1", store.ReplayDuplicate)
	code, out, errOut := b.run("dlq", "show", "dup1")
	wantExit(t, code, out, errOut, 0)
	if !regexp.MustCompile(`\n  \S+  +replayed +duplicate at `).MatchString(out) {
		t.Errorf("dlq show dup1: stdout %q, want the replay's row to say duplicate", out)
	}
	if !strings.Contains(out, "not applied: an earlier copy of this message was applied") || strings.Contains(out, "succeeded") || strings.Contains(out, "pending") {
		t.Errorf("dlq show dup1: stdout %q, want it said not applied (an earlier copy was), neither succeeded nor pending", out)
	}
}

// replayed records a replay of dead letter id, settled a second later
// with outcome.
func replayed(t *testing.T, rp store.DeadLetterReplayer, id string, outcome store.ReplayOutcome) {
	t.Helper()
	ctx := context.Background()
	at := time.Now().Add(-time.Minute)
	if err := rp.BeginReplay(ctx, id, at); err != nil {
		t.Fatal(err)
	}
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{id}, Outcome: outcome, At: at.Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
}

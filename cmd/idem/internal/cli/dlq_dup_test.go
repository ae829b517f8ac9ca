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
	var rp store.DeadLetterReplayer = st
	ctx := context.Background()
	if err := rp.BeginReplay(ctx, "dup1", time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"dup1"}, Outcome: store.ReplayDuplicate, At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := b.run("dlq", "show", "dup1")
	wantExit(t, code, out, errOut, 0)
	if !regexp.MustCompile(`\n  \S+  +replayed +duplicate at `).MatchString(out) {
		t.Errorf("dlq show dup1: stdout %q, want the replay's row to say duplicate", out)
	}
	if !strings.Contains(out, "not applied: an earlier copy of this message was applied") || strings.Contains(out, "succeeded") || strings.Contains(out, "pending") {
		t.Errorf("dlq show dup1: stdout %q, want it said not applied (an earlier copy was), neither succeeded nor pending", out)
	}
}

package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// A dead letter whose replay succeeded is left out of a bulk replay, and
// replaying it by ID needs --force; one whose replay is pending is not
// replayed again.
func TestDLQReplaySkipsResolved(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	st := b.open()
	seed(t, st, deadLetter("ok1", "permanent_error", time.Hour), deadLetter("open1", "permanent_error", time.Hour))
	replayed(t, st, "ok1", store.ReplaySucceeded)

	code, out, errOut := b.run("dlq", "replay", "--reason", "permanent_error", "--dry-run")
	wantExit(t, code, out, errOut, 0)
	if strings.Contains(out, "ok1") || !strings.Contains(out, "would replay open1") {
		t.Errorf("bulk dry run: stdout %q, want open1 only (ok1's replay succeeded)", out)
	}
	code, out, errOut = b.run("dlq", "replay", "--reason", "permanent_error", "--state", "all", "--dry-run")
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "would replay ok1") {
		t.Errorf("bulk dry run --state all: stdout %q, want ok1 too", out)
	}
	code, out, errOut = b.run("dlq", "replay", "ok1")
	wantExit(t, code, out, errOut, 1)
	if !strings.Contains(errOut, "--force") {
		t.Errorf("replay ok1: stderr %q, want --force named", errOut)
	}
	code, out, errOut = b.run("dlq", "replay", "ok1", "--force")
	wantExit(t, code, out, errOut, 0)
	code, out, errOut = b.run("dlq", "replay", "ok1", "--force")
	wantExit(t, code, out, errOut, 1)
	if !strings.Contains(errOut, "still pending") {
		t.Errorf("replay ok1 while its replay is pending: stderr %q, want it said", errOut)
	}
	code, out, errOut = b.run("dlq", "replay", "--all", "--state", "bogus")
	wantExit(t, code, out, errOut, 2)
	if !strings.Contains(errOut, "--state") {
		t.Errorf("--state bogus: stderr %q, want the flag named", errOut)
	}
}

package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

var (
	asOfRE         = regexp.MustCompile(`--as-of (\S+)`)
	failedBeforeRE = regexp.MustCompile(`--failed-before "?([^"\s]+)`)
)

// A bulk replay or purge confirmed on a dry run's count acts on what was
// counted: a dead letter that arrives in between is left alone.
func TestDLQBulkActsOnWhatWasCounted(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	st := b.open()
	seed(t, st, deadLetter("u1", "unknown_type", time.Hour), deadLetter("u2", "unknown_type", time.Hour))

	code, out, errOut := b.run("dlq", "replay", "--reason", "unknown_type", "--dry-run")
	wantExit(t, code, out, errOut, 0)
	m := asOfRE.FindStringSubmatch(out)
	if !strings.Contains(out, "would replay 2 dead letters") || m == nil {
		t.Fatalf("dry run: stdout %q; want the count and the --as-of that binds it", out)
	}
	seed(t, st, deadLetter("u3", "unknown_type", 0))
	code, out, errOut = b.run("dlq", "replay", "--reason", "unknown_type", "--as-of", m[1])
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "re-queued 2 dead letters") || strings.Contains(out, "u3") {
		t.Errorf("replay as of the dry run: stdout %q; want u1 and u2 re-queued, not u3", out)
	}
	if d, err := st.GetDeadLetter(context.Background(), "u3"); err != nil || len(d.Replays) != 0 {
		t.Errorf("u3, which arrived after the count: %+v, %v; want it kept and not replayed", d, err)
	}

	// u1 and u2's replays are pending: --state all selects them too.
	code, out, errOut = b.run("dlq", "purge", "--all", "--reason", "unknown_type", "--state", "all", "--dry-run")
	wantExit(t, code, out, errOut, 0)
	m = asOfRE.FindStringSubmatch(out)
	if !strings.Contains(out, "would delete 3 dead letters") || m == nil {
		t.Fatalf("purge dry run: stdout %q; want the count and the --as-of that binds it", out)
	}
	seed(t, st, deadLetter("u4", "unknown_type", 0))
	code, out, errOut = b.run("dlq", "purge", "--all", "--reason", "unknown_type", "--state", "all", "--yes", "--as-of", m[1])
	wantExit(t, code, out, errOut, 0)
	if out != "deleted 3 dead letters\n" {
		t.Errorf("purge as of the dry run: stdout %q, want 3 deleted", out)
	}
	if _, err := st.GetDeadLetter(context.Background(), "u4"); err != nil {
		t.Errorf("u4, which arrived after the count: %v; want it kept", err)
	}
	code, out, errOut = b.run("dlq", "purge", "--all", "--yes", "--as-of", "not-a-mark")
	wantExit(t, code, out, errOut, 2)
	if !strings.Contains(errOut, "not a mark") {
		t.Errorf("purge with a bad --as-of: stderr %q, want it to say so", errOut)
	}
}

// dlq ls takes --saga-type like sagas ls and timers ls; dlq show prints
// the replay history.
func TestDLQTypeFlagAndHistory(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	st := b.open()
	other := deadLetter("o1", "unknown_type", time.Hour)
	other.SagaType = "billing"
	seed(t, st, deadLetter("h1", "unknown_type", time.Hour), other)
	for _, flag := range []string{"--saga-type"} {
		code, out, errOut := b.run("dlq", "ls", flag, "billing")
		wantExit(t, code, out, errOut, 0)
		if !strings.Contains(out, "o1") || strings.Contains(out, "h1") {
			t.Errorf("dlq ls %s billing: %q, want o1 only", flag, out)
		}
	}
	code, out, _ := b.run("dlq", "ls", "--help")
	if code != 0 || strings.Contains(out, "--type string") || !strings.Contains(out, "--saga-type string") || !strings.Contains(out, "--message-type string") {
		t.Errorf("dlq ls --help: %q; want --saga-type and --message-type shown, and no --type", out)
	}

	code, out, errOut := b.run("dlq", "replay", "h1")
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "re-queued h1") || strings.Contains(out, "replayed h1") {
		t.Errorf("replay h1: %q; want it to say re-queued", out)
	}
	// It fails again, as an engine would record it.
	again := deadLetter("h1", "unknown_type", 0)
	again.Error = "no saga or handler consumes searchimport.SearchRequested"
	again.Envelope.Headers = map[string]string{store.HeaderReplay: time.Now().UTC().Format(time.RFC3339Nano)} // the replayed copy
	seed(t, st, again)
	code, out, errOut = b.run("dlq", "show", "h1")
	wantExit(t, code, out, errOut, 0)
	for _, want := range []string{"History:", "replayed once; failed again at", "first failure", "unknown_type"} {
		if !strings.Contains(out, want) {
			t.Errorf("dlq show h1: want %q in\n%s", want, out)
		}
	}
	code, out, errOut = b.run("dlq", "show", "h1", "--json")
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, `"outcome": "`+string(store.ReplayFailed)+`"`) || !strings.Contains(out, `"first_error"`) {
		t.Errorf("dlq show h1 --json: want the replays and the first failure in\n%s", out)
	}
}

// A malformed --as-of is a usage error (exit 2) naming it, on every
// command that takes one.
func TestDLQBadAsOfIsUsageError(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	seed(t, b.open(), deadLetter("u1", "unknown_type", time.Hour))
	for _, mark := range []string{"<script>", "5:3:", "99999999999999999999"} {
		for _, args := range [][]string{
			{"dlq", "replay", "--reason", "unknown_type", "--as-of", mark},
			{"dlq", "purge", "--all", "--yes", "--as-of", mark},
			{"dlq", "purge", "--all", "--dry-run", "--as-of", mark},
		} {
			code, out, errOut := b.run(args...)
			wantExit(t, code, out, errOut, 2)
			if !strings.Contains(errOut, "as_of") && !strings.Contains(errOut, "as-of") {
				t.Errorf("%v: stderr %q, want it to name --as-of", args, errOut)
			}
		}
	}
}

// A purge confirmed on a dry run deletes what the dry run counted: the
// dry run's --older-than becomes an absolute cutoff in its hint, and a
// relative --older-than together with --as-of is refused (it would be
// recomputed at the confirm, and catch dead letters that aged past it).
func TestDLQPurgeOlderThanBindsTheCutoff(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	st := b.open()
	seed(t, st, deadLetter("old", "unknown_type", 8*24*time.Hour), deadLetter("young", "unknown_type", 7*24*time.Hour-time.Hour))
	code, out, errOut := b.run("dlq", "purge", "--all", "--older-than", "7d", "--dry-run")
	wantExit(t, code, out, errOut, 0)
	m := asOfRE.FindStringSubmatch(out)
	c := failedBeforeRE.FindStringSubmatch(out)
	if !strings.Contains(out, "would delete 1 dead letter") || m == nil || c == nil || strings.Contains(out, "--older-than") {
		t.Fatalf("dry run: %q; want 1, --failed-before CUTOFF and --as-of MARK in the hint, no --older-than", out)
	}
	cutoff, err := time.Parse(time.RFC3339Nano, c[1])
	if err != nil {
		t.Fatalf("--failed-before %q: %v", c[1], err)
	}
	code, out, errOut = b.run("dlq", "purge", "--all", "--older-than", "7d", "--yes", "--as-of", m[1])
	wantExit(t, code, out, errOut, 2)
	if !strings.Contains(errOut, "--failed-before") {
		t.Errorf("--older-than with --as-of: stderr %q, want it to say to pass --failed-before", errOut)
	}
	if !cutoff.Before(time.Now().Add(-7*24*time.Hour + time.Minute)) {
		t.Errorf("--failed-before %s: want now - 7d", cutoff)
	}
	code, out, errOut = b.run("dlq", "purge", "--all", "--failed-before", c[1], "--yes", "--as-of", m[1])
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "deleted 1 dead letter") {
		t.Errorf("confirmed run: %q, want 1 deleted", out)
	}
	if _, err := st.GetDeadLetter(context.Background(), "old"); err == nil {
		t.Errorf("old was counted and is kept")
	}
	if _, err := st.GetDeadLetter(context.Background(), "young"); err != nil {
		t.Errorf("young was not counted and is gone: %v", err)
	}
}

package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// idem dlq groups, archive and restore on the embedded store.
func TestDLQTriage(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	url := "sqlite://" + path
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var dls []store.DeadLetter
	for i := range 3 {
		d := deadLetter(fmt.Sprintf("c-%d", i), "handler_failed", time.Duration(i)*time.Minute)
		d.Error = fmt.Sprintf("charge order %d: card declined", 100+i)
		dls = append(dls, d)
	}
	seed(t, st, append(dls, deadLetter("u-1", "unknown_type", time.Hour))...)
	st.Close()
	fp := store.Fingerprint("handler_failed", "charge order 1: card declined")

	code, out, errOut := run(t, "dlq", "groups", "--store", url)
	wantExit(t, code, out, errOut, 0)
	if !regexp.MustCompile(fp + `\s+handler_failed\s+3\s.*charge order #: card declined`).MatchString(out) {
		t.Errorf("dlq groups: %q, want the declined group of 3 with its fingerprint and masked error", out)
	}
	code, out, errOut = run(t, "dlq", "groups", "--archived", "maybe", "--store", url)
	wantExit(t, code, out, errOut, 2)
	if !strings.Contains(errOut, "want exclude, only or include") {
		t.Errorf("dlq groups --archived maybe: stderr %q, want the values named", errOut)
	}

	code, out, errOut = run(t, "dlq", "archive", "--all", "--fingerprint", fp, "--store", url)
	wantExit(t, code, out, errOut, 2) // --all needs --yes or --dry-run
	code, out, errOut = run(t, "dlq", "archive", "--all", "--fingerprint", fp, "--dry-run", "--store", url)
	wantExit(t, code, out, errOut, 0)
	m := regexp.MustCompile(`--as-of (\S+)`).FindStringSubmatch(out)
	if !strings.Contains(out, "would have archived 3 dead letters") || m == nil || !strings.Contains(out, "--fingerprint") {
		t.Fatalf("archive dry run: %q, want 3 counted and the command bound to the count", out)
	}
	code, out, errOut = run(t, "dlq", "archive", "--all", "--fingerprint", fp, "--yes", "--as-of", m[1], "--store", url)
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "archived 3 dead letters") {
		t.Errorf("archive as of the dry run: %q, want 3 archived", out)
	}
	code, out, errOut = run(t, "dlq", "groups", "--store", url)
	wantExit(t, code, out, errOut, 0)
	if strings.Contains(out, fp) || !strings.Contains(out, "unknown_type") {
		t.Errorf("dlq groups after archiving: %q, want only the unknown_type group", out)
	}
	code, out, errOut = run(t, "dlq", "groups", "--archived", "only", "--json", "--store", url)
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, `"fingerprint": "`+fp+`"`) || !strings.Contains(out, `"count": 3`) {
		t.Errorf("dlq groups --archived only --json: %q, want the archived group of 3", out)
	}

	code, out, errOut = run(t, "dlq", "ls", "--store", url)
	wantExit(t, code, out, errOut, 0)
	if strings.Contains(out, "c-1") || !strings.Contains(out, "u-1") {
		t.Errorf("dlq ls after archiving: %q, want u-1 and no archived c-*", out)
	}
	code, out, errOut = run(t, "dlq", "ls", "--archived", "only", "--store", url)
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "c-0") || !strings.Contains(out, "c-2") || strings.Contains(out, "u-1") {
		t.Errorf("dlq ls --archived only: %q, want the archived c-0..c-2 only", out)
	}
	code, out, errOut = run(t, "dlq", "purge", "--all", "--archived", "only", "--dry-run", "--store", url)
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "would delete 3 dead letters") || !strings.Contains(out, `--archived only`) {
		t.Errorf("purge --all --archived only --dry-run: %q, want the 3 archived counted, and the hint keeping --archived only", out)
	}
	code, out, errOut = run(t, "dlq", "restore", "c-1", "missing", "--store", url)
	wantExit(t, code, out, errOut, 1)
	if !strings.Contains(out, "restored 1 dead letter") || !strings.Contains(errOut, "1 of the 2 dead letters named") {
		t.Errorf("restore c-1 and a missing ID: out %q, err %q; want 1 restored and the missing one reported", out, errOut)
	}
	code, out, errOut = run(t, "dlq", "restore", "--all", "--yes", "--store", url)
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "restored 2 dead letters") {
		t.Errorf("restore --all: %q, want the other 2 restored", out)
	}
	st, err = sqlitestore.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, id := range []string{"c-0", "c-1", "c-2"} {
		if d, err := st.GetDeadLetter(ctx, id); err != nil || d.Archived() {
			t.Errorf("%s after restoring: %v, archived %v; want it back", id, err, d != nil && d.Archived())
		}
	}
}

package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemhq/idem/store/sqlitestore"
)

// idem dlq archive|restore|purge ID… refuse the flags of --all (exit 2,
// saying what to change) instead of acting on the IDs anyway: a --dry-run
// must never change anything, and --archived only must not be ignored.
func TestDLQIDsRefuseAllFlags(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	url := "sqlite://" + path
	ctx := context.Background()
	st, err := sqlitestore.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	seed(t, st, deadLetter("c-1", "handler_failed", 0))
	st.Close()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"archive", "c-1", "--dry-run"}, "--dry-run"},
		{[]string{"archive", "c-1", "--yes"}, "--yes"},
		{[]string{"archive", "c-1", "--as-of", "1"}, "--as-of"},
		{[]string{"restore", "c-1", "--dry-run"}, "--dry-run"},
		{[]string{"purge", "c-1", "--dry-run"}, "--dry-run"},
		{[]string{"purge", "c-1", "--yes"}, "--yes"},
		{[]string{"purge", "c-1", "--as-of", "1"}, "--as-of"},
		{[]string{"purge", "c-1", "--archived", "only"}, "--archived"},
	} {
		args := append(append([]string{"dlq"}, tc.args...), "--store", url)
		code, out, errOut := run(t, args...)
		if code != 2 || !strings.Contains(errOut, tc.want) || !strings.Contains(errOut, "--all") {
			t.Errorf("idem %s: exit %d, stderr %q; want 2 naming %s and --all", strings.Join(tc.args, " "), code, errOut, tc.want)
		}
		if strings.Contains(out, "archived") || strings.Contains(out, "deleted") || strings.Contains(out, "restored") {
			t.Errorf("idem %s: stdout %q, want nothing done", strings.Join(tc.args, " "), out)
		}
	}
	st, err = sqlitestore.Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if d, err := st.GetDeadLetter(ctx, "c-1"); err != nil || d.Archived() {
		t.Errorf("c-1 after the refused commands: %v, archived %v; want it untouched", err, d != nil && d.Archived())
	}
}

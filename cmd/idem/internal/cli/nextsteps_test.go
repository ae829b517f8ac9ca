package cli

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The demo ends with what to look at next: with --db, commands that read
// the database it kept, and that run as printed; without, how to keep one
// (issue 31, item 19).
func TestDemoSaysWhatToLookAtNext(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "demo.db")
	code, out, errOut := run(t, "demo", "--db", db, "--searches", "20", "--kills", "0", "--replicas", "1", "--progress=false")
	if code != 0 {
		t.Fatalf("demo --db: exit %d\n%s\n%s", code, out, errOut)
	}
	_, next, ok := strings.Cut(out, "PASS")
	if !ok || !strings.Contains(next, "kept at "+db) || !strings.Contains(next, "idem serve --store sqlite://"+db) {
		t.Fatalf("demo --db: after PASS %q; want the kept database and idem serve on it", next)
	}
	cmd := hint(t, next, "Look at what the run left:\n  ")
	code, got, errOut := run(t, cmd...)
	if code != 0 || !strings.Contains(got, "searchimport") {
		t.Errorf("%q, as printed: exit %d, out %q, err %q; want the run's sagas", cmd, code, got, errOut)
	}

	code, out, _ = run(t, "demo", "--store", "memory", "--searches", "20", "--progress=false", "--lose-acks", "0")
	if _, next, _ := strings.Cut(out, "PASS"); code != 0 || !strings.Contains(next, "idem demo --db") || !strings.Contains(next, "idem demo --serve") {
		t.Errorf("demo in memory: exit %d, after PASS %q; want how to keep a database (--db) and --serve", code, next)
	}
}

// Every line idem serve logs is slog's, the store's first one (the
// migration of a new database) included (issue 31, item 17).
func TestServeLogsOnlySlog(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb lockedBuffer
	exited := make(chan int, 1)
	go func() {
		exited <- Run(ctx, []string{"serve", "--store", "sqlite://" + filepath.Join(t.TempDir(), "new.db"), "--addr", freeAddr(t)}, &out, &errb)
	}()
	deadline := time.Now().Add(15 * time.Second)
	for !strings.Contains(errb.String(), "listening") {
		select {
		case c := <-exited:
			t.Fatalf("serve exited with %d; stderr:\n%s", c, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not log listening in time; stderr:\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	cancel()
	if c := <-exited; c != 0 {
		t.Errorf("serve exited %d after the interrupt", c)
	}
	lines := strings.Split(strings.TrimSpace(errb.String()), "\n")
	if !strings.Contains(errb.String(), "migrated database schema") {
		t.Errorf("serve on a new database: stderr %q; want the store's migration logged", errb.String())
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "time=") {
			t.Errorf("serve logged %q, not in slog's text format", l)
		}
	}
}

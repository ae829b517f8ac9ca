package ledger_test

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/examples/dispatch/ledger"
)

// Writers that start together create one SQLite file together. Switching
// a new file to WAL mode needs the write lock, and SQLite refuses it at
// once (SQLITE_BUSY, whatever the busy timeout) to a connection that read
// the file while another held that lock. Open must wait for the lock
// instead. Here a connection of its own holds the lock, as another
// writer's does in the middle of its switch.
func TestOpenWaitsForAnotherOpenersLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	other.SetMaxOpenConns(1)
	ctx := context.Background()
	if _, err := other.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.ExecContext(ctx, "CREATE TABLE other_writer (x INTEGER)"); err != nil {
		t.Fatal(err)
	}

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if d, err := ledger.Open(short, path, "dispatch"); err == nil {
		d.Close()
		t.Fatal("Open succeeded while another connection held the write lock of the new file")
	} else if short.Err() == nil {
		t.Fatalf("Open gave up before its context ended, while another opener held the lock: %v", err)
	}

	if _, err := other.ExecContext(ctx, "COMMIT"); err != nil {
		t.Fatal(err)
	}
	d, err := ledger.Open(ctx, path, "dispatch")
	if err != nil {
		t.Fatalf("Open after the other opener committed: %v", err)
	}
	defer d.Close()
	if err := d.Migrate(ctx, ledger.Strict); err != nil {
		t.Fatal(err)
	}
}

// The same, as it happens: several writers open and migrate one new file
// at once, each with connections of its own (SQLite locks them against each
// other as it locks separate processes).
func TestOpenNewFileTogether(t *testing.T) {
	const rounds, openers = 10, 8
	ctx := context.Background()
	for r := range rounds {
		path := filepath.Join(t.TempDir(), fmt.Sprintf("ledger-%d.db", r))
		start := make(chan struct{})
		errs := make(chan error, openers)
		var wg sync.WaitGroup
		for range openers {
			wg.Go(func() {
				<-start
				d, err := ledger.Open(ctx, path, "dispatch")
				if err == nil {
					err = d.Migrate(ctx, ledger.Naive)
					d.Close()
				}
				errs <- err
			})
		}
		close(start)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %d openers of one new file: %v", r, openers, err)
			}
		}
	}
}

// A writer that fails before it is ready says why on its stderr, and the
// tests show it (read once the child is gone, never while exec still
// copies it).
func TestChildNotReadyShowsItsStderr(t *testing.T) {
	db := filepath.Join(t.TempDir(), "no-such-dir", "ledger.db")
	events := writeEvents(t, nil)
	c := startChild(t, "write", "-db", db, "-events", events, "-wait-start", "-naive")
	err := c.waitReady()
	if err == nil || !strings.Contains(err.Error(), "open ledger") {
		t.Fatalf("waitReady: %v; want the child's error, which names the ledger", err)
	}
}

package sqlitestore

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// The writing connection is durable: WAL with synchronous=FULL. Readers
// cannot write.
func TestConnectionsAreDurableAndReadersReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var mode string
	var syncMode int
	if err := s.wconn.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("writer journal_mode: %q, %v; want wal", mode, err)
	}
	if err := s.wconn.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&syncMode); err != nil || syncMode != 2 {
		t.Errorf("writer synchronous: %d, %v; want 2 (FULL)", syncMode, err)
	}
	_, err = s.rdb.ExecContext(ctx, `DELETE FROM idem_queue`)
	if err == nil || !strings.Contains(err.Error(), "readonly") {
		t.Errorf("write on a reader connection: got %v, want a read-only refusal", err)
	}
}

// Concurrent commits share transactions: fewer COMMITs than requests, and
// a request that fails in a group rolls back alone.
func TestWritesAreGroupedAndFailuresIsolated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Now().UTC().Truncate(time.Microsecond)
	commit := func(c *store.Changes) error {
		u, _ := s.Begin(ctx)
		return u.Commit(ctx, c)
	}
	if err := commit(&store.Changes{Inserts: []*store.Instance{{SagaType: "t", Key: "taken", State: "A", Data: []byte(`{}`), Version: 1, CreatedAt: now, UpdatedAt: now}}}); err != nil {
		t.Fatal(err)
	}
	const n = 64
	before := s.commits.Load()
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			key := "taken" // every fourth request conflicts
			if i%4 != 0 {
				key = "k-" + strings.Repeat("x", i)
			}
			errs[i] = commit(&store.Changes{
				Inserts: []*store.Instance{{SagaType: "t", Key: key, State: "A", Data: []byte(`{}`), Version: 1, CreatedAt: now, UpdatedAt: now}},
				Inbox:   []store.InboxEntry{{InboxKey: store.InboxKey{SagaType: "t", Key: key, MessageID: "m"}, ProcessedAt: now}},
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if (i%4 == 0) != (err != nil) {
			t.Errorf("request %d: got error %v", i, err)
		}
	}
	if c := s.commits.Load() - before; c >= n-n/4 {
		t.Errorf("%d concurrent commits took %d transactions, want fewer (grouped)", n, c)
	} else {
		t.Logf("%d concurrent commits took %d transactions", n, c)
	}
	var inbox, instances int
	if err := s.rdb.QueryRowContext(ctx, `SELECT (SELECT count(*) FROM idem_inbox), (SELECT count(*) FROM idem_instances)`).Scan(&inbox, &instances); err != nil {
		t.Fatal(err)
	}
	if want := n - n/4; inbox != want || instances != want+1 {
		t.Errorf("after %d commits of which %d conflicted: %d inbox records and %d instances, want %d and %d", n, n/4, inbox, instances, want, want+1)
	}
}

package admin_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// replicaStore is a fresh store that is also its queue.
type replicaStore interface {
	store.Queue
	store.ReplicaRegistry
}

// openReplicaStore opens a fresh SQLite file, or a PostgreSQL schema of its
// own (skipped without IDEM_TEST_PG_URL, failed under IDEM_REQUIRE_SERVERS).
func openReplicaStore(t *testing.T, kind string) replicaStore {
	t.Helper()
	ctx := context.Background()
	quiet := slog.New(slog.DiscardHandler)
	if kind == "sqlite" {
		st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		return st
	}
	url := testenv.PostgresURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "admin_replicas_" + hex.EncodeToString(b[:])
	st, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: schema, Migrate: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = st.Pool().Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		_ = st.Close()
	})
	return st
}

// In a browser, on SQLite and on PostgreSQL: two engines on one store are
// two alive replicas on the Replicas page; once one stops, the page (which
// refreshes itself) shows it stopped and the other alive.
func TestBrowserReplicas(t *testing.T) {
	t.Parallel()
	ctx, dialog := chrome(t)
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			shot := func(name string) { // the docs show SQLite's
				if kind == "sqlite" {
					screenshot(t, ctx, name)
				}
			}
			st := openReplicaStore(t, kind)
			var es []*idem.Engine
			for range 2 {
				e := enginetest.NewEngine(t, st, st, &idem.Config{HeartbeatInterval: time.Second})
				if err := e.Start(context.Background()); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = e.Stop(context.Background()) })
				es = append(es, e)
			}
			served, other := es[0], es[1]
			h, err := admin.New(served, st, &admin.Config{Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			row := func(e *idem.Engine, state string) string {
				return `tr[data-replica="` + e.ReplicaID() + `"][data-state="` + state + `"]`
			}
			// One message applied: a replica has a last batch to show.
			env, err := served.NewEnvelope("inc-1", enginetest.Inc{Key: "k-1", N: 1})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := served.PublishAndWait(context.Background(), env); err != nil {
				t.Fatal(err)
			}
			eventually(t, "a replica's heartbeat with its last batch", func() bool {
				rs, err := st.Replicas(context.Background(), 10)
				return err == nil && len(rs) == 2 && (!rs[0].LastBatchAt.IsZero() || !rs[1].LastBatchAt.IsZero())
			})
			var text string
			run(t, ctx, "replicas page", chromedp.Navigate(srv.URL+"/replicas"),
				chromedp.WaitVisible(row(served, "alive")), chromedp.WaitVisible(row(other, "alive")), chromedp.Text("#replica-counts", &text))
			if got := strings.Join(strings.Fields(text), " "); got != "alive 2 stopped 0 gone 0 replaced 0" {
				t.Errorf("counts with two engines running: %q, want alive 2 stopped 0 gone 0", got)
			}
			run(t, ctx, "the served replica's row", chromedp.TextContent(row(served, "alive"), &text))
			if !strings.Contains(text, "this console") || !strings.Contains(text, "sagas="+enginetest.SagaType) {
				t.Errorf("row of the console's replica: %q, want it marked and its configuration summary", text)
			}
			run(t, ctx, "the replicas table", chromedp.Text("#replicas", &text))
			if strings.Count(text, "none yet") > 1 {
				t.Errorf("replicas table after one applied message: %q, want a replica with a last batch", text)
			}
			shot("replicas")

			if err := other.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
			// No reload: the page polls, and the row changes in place.
			run(t, ctx, "the stopped replica", chromedp.WaitVisible(row(other, "stopped")), chromedp.WaitVisible(row(served, "alive")),
				chromedp.Text("#replica-counts", &text))
			if got := strings.Join(strings.Fields(text), " "); got != "alive 1 stopped 1 gone 0 replaced 0" {
				t.Errorf("counts after one engine stopped: %q, want alive 1 stopped 1 gone 0", got)
			}
			var nested int
			run(t, ctx, "one live region", chromedp.Evaluate(`document.querySelectorAll("#replicas-live").length`, &nested))
			if nested != 1 {
				t.Errorf("after a refresh the page holds %d #replicas-live regions, want 1 (the poll nests its response)", nested)
			}
			shot("replicas-stopped")
		})
	}
	if dialog.Load() {
		t.Error("a JavaScript dialog opened")
	}
}

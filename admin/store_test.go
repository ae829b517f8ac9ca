package admin_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

// consoleStore is what the console tests need of a store: the store, the
// queue the engine consumes, and the optional capabilities they read.
type consoleStore interface {
	store.Store
	transport.Transport
	store.Scheduler
	store.TokenStore
	store.RetryRecorder
	store.ReplicaRegistry
	Close() error
}

// consoleStoreEnv names the store the console tests run on: "sqlite" (the
// default) or "postgres". scripts/test runs the browser tests once with
// each.
const consoleStoreEnv = "IDEM_CONSOLE_STORE"

// openConsoleStore opens a fresh store of the kind IDEM_CONSOLE_STORE
// names: a SQLite file, or a PostgreSQL schema of its own, dropped when the
// test ends. The caller closes it.
func openConsoleStore(t *testing.T, logger *slog.Logger) consoleStore {
	t.Helper()
	ctx := t.Context()
	switch kind := os.Getenv(consoleStoreEnv); kind {
	case "", "sqlite":
		st, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		return st
	case "postgres":
		url := testenv.PostgresURL(t)
		schema := fmt.Sprintf("admin_console_%d_%d", os.Getpid(), time.Now().UnixNano())
		st, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: schema, Migrate: true, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dropSchema(t, url, schema) })
		return st
	default:
		t.Fatalf("%s=%q: want sqlite or postgres", consoleStoreEnv, kind)
		return nil
	}
}

// dropSchema removes a test's PostgreSQL schema on a connection of its own
// (the store's pool is closed by then).
func dropSchema(t *testing.T, url, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}

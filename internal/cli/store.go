package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// storeFlags are the flags of every command that opens a store.
type storeFlags struct {
	url               string
	schema            string
	migrate           bool
	allowUnsafeCommit bool
}

func (f *storeFlags) register(cmd *cobra.Command) {
	def := os.Getenv("IDEM_STORE")
	cmd.Flags().StringVar(&f.url, "store", def, "store to use: postgres://user@host:port/db or sqlite:///path/to/idem.db (default from IDEM_STORE)")
	cmd.Flags().StringVar(&f.schema, "schema", "idem", "PostgreSQL schema holding Idem's tables (PostgreSQL only)")
	cmd.Flags().BoolVar(&f.migrate, "migrate", false, "create or upgrade the schema at start-up")
	cmd.Flags().BoolVar(&f.allowUnsafeCommit, "allow-unsafe-commit", false,
		"accept a server with synchronous_commit=off or fsync=off: a crash MAY LOSE ACKNOWLEDGED MESSAGES")
}

// open opens the store the flags name: postgres:// or postgresql:// for
// PostgreSQL, sqlite:///path (or sqlite:path) for the embedded store. Both
// are also queues. Other schemes are refused with a message saying what is
// supported. It returns the store and the schema version it is at.
func (f *storeFlags) open(ctx context.Context, migrate bool) (store.Queue, int, error) {
	if f.url == "" {
		return nil, 0, usageErrorf("no store given: pass --store postgres://user@host:port/db or sqlite:///path, or set IDEM_STORE")
	}
	scheme, rest, ok := strings.Cut(f.url, ":")
	switch {
	case ok && (scheme == "postgres" || scheme == "postgresql"):
		s, err := pgstore.Open(ctx, f.url, &pgstore.Config{Schema: f.schema, Migrate: migrate || f.migrate, AllowUnsafeCommit: f.allowUnsafeCommit})
		if err != nil {
			return nil, 0, &exitError{code: 2, err: err}
		}
		return s, pgstore.SchemaVersion(), nil
	case ok && scheme == "sqlite":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return nil, 0, usageErrorf("store %q names no file: use sqlite:///path/to/idem.db", f.url)
		}
		s, err := sqlitestore.Open(ctx, path, &sqlitestore.Config{SkipMigrate: !(migrate || f.migrate)})
		if err != nil {
			return nil, 0, &exitError{code: 2, err: err}
		}
		return s, sqlitestore.SchemaVersion(), nil
	}
	return nil, 0, usageErrorf("unsupported store %q: use postgres://user@host:port/db or sqlite:///path/to/idem.db", redactURL(f.url))
}

// usageErrorf is a configuration or usage error: exit code 2.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// redactURL hides the password of a connection string.
func redactURL(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		return u
	}
	at := strings.LastIndexByte(rest, '@')
	if at < 0 {
		return u
	}
	userinfo := rest[:at]
	if user, _, hasPass := strings.Cut(userinfo, ":"); hasPass {
		return scheme + "://" + user + ":***@" + rest[at+1:]
	}
	return u
}

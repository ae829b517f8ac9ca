package cli

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/store/pgstore"
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
	cmd.Flags().StringVar(&f.url, "store", def, "store to use: postgres://user@host:port/db (default from IDEM_STORE)")
	cmd.Flags().StringVar(&f.schema, "schema", "idem", "PostgreSQL schema holding Idem's tables")
	cmd.Flags().BoolVar(&f.migrate, "migrate", false, "create or upgrade the schema at start-up")
	cmd.Flags().BoolVar(&f.allowUnsafeCommit, "allow-unsafe-commit", false,
		"accept a server with synchronous_commit=off or fsync=off: a crash MAY LOSE ACKNOWLEDGED MESSAGES")
}

// openPG opens the PostgreSQL store the flags name. Other schemes are
// refused with a message saying what is supported.
func (f *storeFlags) openPG(ctx context.Context, migrate bool) (*pgstore.Store, error) {
	if f.url == "" {
		return nil, usageErrorf("no store given: pass --store postgres://user@host:port/db or set IDEM_STORE")
	}
	scheme, _, ok := strings.Cut(f.url, "://")
	if !ok || (scheme != "postgres" && scheme != "postgresql") {
		return nil, usageErrorf("unsupported store %q: use postgres://user@host:port/db", redactURL(f.url))
	}
	s, err := pgstore.Open(ctx, f.url, &pgstore.Config{Schema: f.schema, Migrate: migrate || f.migrate, AllowUnsafeCommit: f.allowUnsafeCommit})
	if err != nil {
		return nil, &exitError{code: 2, err: err}
	}
	return s, nil
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

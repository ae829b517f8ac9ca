package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/spf13/cobra"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// defaultStore is the store of every command when neither --store nor
// IDEM_STORE names one: idem.db in the working directory.
const defaultStore = "sqlite:idem.db"

// storeFlags are the flags of every command that opens a store.
type storeFlags struct {
	url               string
	schema            string
	migrate           bool
	allowUnsafeCommit bool
	// offersMigrate is false for read-only commands, which have no
	// --migrate; flag is --store, to tell where the URL came from.
	offersMigrate bool
	flag          *cobra.Command
	// logger receives the store's logs (a migration done, say); nil
	// means warnings and errors only, as text on the command's stderr.
	logger *slog.Logger
}

// register adds the store flags of a command that may change the store:
// --migrate among them.
func (f *storeFlags) register(cmd *cobra.Command) {
	f.registerReadOnly(cmd)
	f.offersMigrate = true
	cmd.Flags().BoolVar(&f.migrate, "migrate", false, "create or upgrade the schema before running")
}

// registerReadOnly adds the store flags of a command that only reads: no
// --migrate.
func (f *storeFlags) registerReadOnly(cmd *cobra.Command) {
	f.flag = cmd
	cmd.Flags().StringVar(&f.url, "store", os.Getenv("IDEM_STORE"), "store to use: postgres://user@host:port/db or sqlite:///path/to/idem.db (default from IDEM_STORE, else "+defaultStore+")")
	cmd.Flags().StringVar(&f.schema, "schema", "idem", "PostgreSQL schema holding Idem's tables (PostgreSQL only)")
	cmd.Flags().BoolVar(&f.allowUnsafeCommit, "allow-unsafe-commit", false,
		"accept a server with synchronous_commit=off or fsync=off: a crash MAY LOSE ACKNOWLEDGED MESSAGES")
}

// source says where the store URL came from, for error messages.
func (f *storeFlags) source() string {
	switch {
	case f.flag != nil && f.flag.Flags().Changed("store"):
		return "--store"
	case f.flag != nil && os.Getenv("IDEM_STORE") != "":
		return "IDEM_STORE"
	case f.url == defaultStore:
		return "the default: neither --store nor IDEM_STORE is set"
	}
	return "the command"
}

// resolve applies the default store.
func (f *storeFlags) resolve() error {
	if f.url != "" {
		return nil
	}
	if f.flag != nil && f.flag.Flags().Changed("store") {
		return usageErrorf("no store given: --store is empty: pass --store postgres://user@host:port/db or sqlite:///path, or leave it out for %s", defaultStore)
	}
	f.url = defaultStore
	return nil
}

// open opens the store the flags name: postgres:// or postgresql:// for
// PostgreSQL, sqlite:///path (or sqlite:path) for the embedded store. Both
// are also queues. Other schemes are refused with a message saying what is
// supported. It returns the store and the schema version it is at.
func (f *storeFlags) open(ctx context.Context, migrate bool) (store.Queue, int, error) {
	if err := f.resolve(); err != nil {
		return nil, 0, err
	}
	migrate = migrate || f.migrate
	logger := f.logger
	if logger == nil {
		w := io.Writer(os.Stderr)
		if f.flag != nil {
			w = f.flag.ErrOrStderr()
		}
		logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	scheme, rest, ok := strings.Cut(f.url, ":")
	switch {
	case ok && (scheme == "postgres" || scheme == "postgresql"):
		s, err := pgstore.Open(ctx, f.url, &pgstore.Config{Schema: f.schema, Migrate: migrate, AllowUnsafeCommit: f.allowUnsafeCommit, Logger: logger})
		if err != nil {
			return nil, 0, f.openError(err)
		}
		return s, pgstore.SchemaVersion(), nil
	case ok && scheme == "sqlite":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return nil, 0, usageErrorf("store %q (from %s) names no file: use sqlite:///path/to/idem.db", f.url, f.source())
		}
		s, err := sqlitestore.Open(ctx, path, &sqlitestore.Config{SkipMigrate: !migrate, Logger: logger})
		if err != nil {
			return nil, 0, f.openError(err)
		}
		return s, sqlitestore.SchemaVersion(), nil
	}
	return nil, 0, usageErrorf("unsupported store %q (from %s): use postgres://user@host:port/db or sqlite:///path/to/idem.db", redactURL(f.url), f.source())
}

// openError turns a store's refusal into what to do on this command line:
// the migrate command that fits (with the schema given), and for a server
// that cannot be reached, the dial error once and where the URL came from.
func (f *storeFlags) openError(err error) error {
	var ce *pgconn.ConnectError
	switch {
	case errors.Is(err, store.ErrNotMigrated):
		return usageErrorf("%s\nto create or upgrade it: %s", storeProblem(err), f.migrateHint())
	case errors.As(err, &ce):
		cause := error(ce)
		var op *net.OpError
		if errors.As(err, &op) {
			cause = op
		}
		host := "the server"
		if ce.Config != nil {
			host = net.JoinHostPort(ce.Config.Host, fmt.Sprint(ce.Config.Port))
		}
		return usageErrorf("cannot reach PostgreSQL at %s: %v: check that the server runs and that %s (from %s) is right", host, cause, redactURL(f.url), f.source())
	}
	return &exitError{code: 2, err: err}
}

// storeProblem is the text of a store's ErrNotMigrated without the advice
// the store gives its Go callers ("run idem migrate ... or set
// Config.Migrate"): the command line gives its own, migrateHint.
func storeProblem(err error) string {
	text := err.Error()
	if i := strings.Index(text, "run `idem migrate"); i > 0 {
		text = strings.TrimRight(text[:i], " ;:,")
	}
	return text
}

// migrateHint is the command that migrates the store the flags name, with
// its --store (unless it came from IDEM_STORE, or holds a password: then
// from IDEM_STORE) and, on PostgreSQL, its --schema.
func (f *storeFlags) migrateHint() string {
	fix := "idem migrate"
	note := ""
	if f.source() == "--store" {
		if holdsSecret(f.url) {
			fix += ` --store "$IDEM_STORE"`
			note = "\n  (set IDEM_STORE to your --store URL first: it holds a password, which idem never prints)"
		} else {
			fix += " --store " + hintWord(f.url)
		}
	}
	if !strings.HasPrefix(f.url, "sqlite:") {
		fix += " --schema " + hintWord(f.schema)
	}
	if f.offersMigrate {
		fix += ", or pass --migrate"
	}
	return fix + note
}

// shellWord quotes s for a POSIX shell when it needs it.
func shellWord(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./-_", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// usageErrorf is a configuration or usage error: exit code 2.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// directURLRE finds pgstore's idem_direct_url query parameter: a whole
// URL, escaped, whose password the rest of redactURL cannot see.
var directURLRE = regexp.MustCompile(pgstore.DirectURLParam + `=[^&\s]*`)

// redactURL hides the password of a connection string.
func redactURL(u string) string {
	u = directURLRE.ReplaceAllString(u, pgstore.DirectURLParam+"=***")
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

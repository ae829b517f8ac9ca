package sqlitestore_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// rawDB opens the store's file beside the store, as another program would.
func rawDB(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func wantErr(t *testing.T, what string, err error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: Open succeeded, want an error", what)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: error %q lacks %q", what, err, p)
		}
	}
}

func TestOpenRefusesMissingDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "no", "such")
	_, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "idem.db"), &sqlitestore.Config{Logger: quiet})
	wantErr(t, "missing directory", err, dir, "does not exist", "mkdir -p")
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("Open created %s: %v", dir, serr)
	}
}

func TestOpenRefusesFileAsDirectory(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := sqlitestore.Open(context.Background(), filepath.Join(file, "idem.db"), &sqlitestore.Config{Logger: quiet})
	wantErr(t, "file as directory", err, "is not a directory")

	_, err = sqlitestore.Open(context.Background(), t.TempDir(), nil)
	wantErr(t, "directory as file", err, "is a directory", "idem.db")
}

func TestOpenRefusesUnwritableDirectory(t *testing.T) {
	t.Parallel()
	if os.Geteuid() == 0 {
		t.Skip("running as root, which may write to any directory: run the tests as another user to check this refusal")
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Chmod(dir, 0o700) })
	_, err := sqlitestore.Open(context.Background(), filepath.Join(dir, "idem.db"), &sqlitestore.Config{Logger: quiet})
	wantErr(t, "read-only directory", err, dir, "not writable", "-wal")

	// A read-only database file in a writable directory.
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := sqlitestore.Open(context.Background(), path, &sqlitestore.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := os.Chmod(path, 0o400); err != nil {
		t.Fatal(err)
	}
	_, err = sqlitestore.Open(context.Background(), path, &sqlitestore.Config{Logger: quiet})
	wantErr(t, "read-only file", err, path, "not writable", "permissions")
}

func TestOpenRefusesNonDatabase(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, content := range map[string]string{
		"text":  "name,qty\nwidget,2\n",
		"short": "SQLite",
		"json":  `{"not":"a database, but long enough to have a header"}`,
	} {
		path := filepath.Join(dir, name+".db")
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := sqlitestore.Open(context.Background(), path, &sqlitestore.Config{Logger: quiet})
		wantErr(t, name, err, "not a SQLite database", path)
		if got, _ := os.ReadFile(path); string(got) != content {
			t.Errorf("%s: Open changed the file", name)
		}
	}
}

func TestOpenRefusesInMemoryAndURIs(t *testing.T) {
	t.Parallel()
	for _, p := range []string{"", ":memory:", "file::memory:?cache=shared", "file:idem.db"} {
		_, err := sqlitestore.Open(context.Background(), p, nil)
		if err == nil {
			t.Errorf("Open(%q) succeeded, want a refusal", p)
		}
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	s, err := sqlitestore.Open(context.Background(), path, &sqlitestore.Config{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	next := sqlitestore.SchemaVersion() + 1
	if _, err := rawDB(t, path).Exec(`INSERT INTO idem_migrations (version, name, applied_at) VALUES (?, 'from_the_future.sql', 0)`, next); err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []*sqlitestore.Config{{Logger: quiet}, {SkipMigrate: true, Logger: quiet}} {
		_, err = sqlitestore.Open(context.Background(), path, cfg)
		if !errors.Is(err, store.ErrSchemaTooNew) {
			t.Fatalf("Open (config %+v) of a file at schema version %d: got %v, want store.ErrSchemaTooNew", cfg, next, err)
		}
		wantErr(t, "newer schema", err, "upgrade Idem")
	}
}

func TestSkipMigrateRefusesMissingAndOldSchema(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	_, err := sqlitestore.Open(context.Background(), missing, &sqlitestore.Config{SkipMigrate: true, Logger: quiet})
	if !errors.Is(err, store.ErrNotMigrated) || !strings.Contains(err.Error(), "idem migrate") {
		t.Fatalf("SkipMigrate on a missing file: got %v, want store.ErrNotMigrated saying to run idem migrate", err)
	}
	if _, serr := os.Stat(missing); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("Open with SkipMigrate created %s", missing)
	}

	// A SQLite database without Idem's tables.
	other := filepath.Join(dir, "other.db")
	if _, err := rawDB(t, other).Exec(`CREATE TABLE app (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	_, err = sqlitestore.Open(context.Background(), other, &sqlitestore.Config{SkipMigrate: true, Logger: quiet})
	if !errors.Is(err, store.ErrNotMigrated) {
		t.Fatalf("SkipMigrate on a database without Idem's schema: got %v, want store.ErrNotMigrated", err)
	}

	// Migrated by default, then accepted with SkipMigrate.
	s, err := sqlitestore.Open(context.Background(), other, &sqlitestore.Config{Logger: quiet})
	if err != nil {
		t.Fatalf("Open migrating another application's database: %v", err)
	}
	s.Close()
	s, err = sqlitestore.Open(context.Background(), other, &sqlitestore.Config{SkipMigrate: true, Logger: quiet})
	if err != nil {
		t.Fatalf("SkipMigrate on a migrated database: %v", err)
	}
	s.Close()
}

func TestOpenRefusesNegativeConfig(t *testing.T) {
	t.Parallel()
	_, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{PollInterval: -time.Second, Logger: quiet})
	wantErr(t, "negative PollInterval", err, "Config.PollInterval")
}

func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "idem.db")
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			s, err := sqlitestore.Open(context.Background(), path, &sqlitestore.Config{Logger: quiet})
			if err == nil {
				err = s.Close()
			}
			errs <- err
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent Open: %v", err)
		}
	}
	var n, v int
	if err := rawDB(t, path).QueryRow(`SELECT count(*), max(version) FROM idem_migrations`).Scan(&n, &v); err != nil {
		t.Fatal(err)
	}
	if n != sqlitestore.SchemaVersion() || v != sqlitestore.SchemaVersion() {
		t.Errorf("idem_migrations: %d rows up to version %d, want %d", n, v, sqlitestore.SchemaVersion())
	}
}

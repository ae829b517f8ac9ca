package sqlitestore_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/store/storetest"
)

// schemaFeature opens the store, with Config.SkipMigrate, on a file whose
// idem_migrations records version v: no file for 0, a migrated file with
// the later versions' records deleted below the package's version, and
// with a record from a newer Idem above it.
var schemaFeature = &storetest.Schema{
	Version:      sqlitestore.SchemaVersion(),
	RefusesNewer: true,
	OpenAt: func(t *testing.T, v int) error {
		path := filepath.Join(t.TempDir(), "idem.db")
		if v > 0 {
			s, err := sqlitestore.Open(context.Background(), path, &sqlitestore.Config{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			db := rawDB(t, path)
			if _, err := db.Exec(`DELETE FROM idem_migrations WHERE version > ?`, v); err != nil {
				t.Fatal(err)
			}
			if v > sqlitestore.SchemaVersion() {
				if _, err := db.Exec(`INSERT INTO idem_migrations (version, name, applied_at) VALUES (?, 'from_the_future.sql', 0)`, v); err != nil {
					t.Fatal(err)
				}
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
		}
		s, err := sqlitestore.Open(context.Background(), path, &sqlitestore.Config{SkipMigrate: true, Logger: quiet})
		if err == nil {
			err = s.Close()
		}
		return err
	},
}

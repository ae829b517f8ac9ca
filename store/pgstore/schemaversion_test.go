package pgstore_test

import (
	"context"
	"testing"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/storetest"
)

// schemaFeature opens the store, with Config.Migrate off, on a schema whose
// idem_migrations records version v: none at all for 0, a migrated schema
// with the later versions' records deleted below the package's version, and
// with a record from a newer Idem above it. pgstore accepts a newer schema.
var schemaFeature = &storetest.Schema{
	Version: pgstore.SchemaVersion(),
	OpenAt: func(t *testing.T, v int) error {
		schema := "never_migrated_" + randHex()
		if v > 0 {
			schema = openStore(t, pgstore.Config{}).Schema()
			conn := schemaConn(t, schema)
			if _, err := conn.Exec(t.Context(), `DELETE FROM idem_migrations WHERE version > $1`, v); err != nil {
				t.Fatal(err)
			}
			if v > pgstore.SchemaVersion() {
				if _, err := conn.Exec(t.Context(), `INSERT INTO idem_migrations (version, name) VALUES ($1, 'from_the_future.sql')`, v); err != nil {
					t.Fatal(err)
				}
			}
		}
		s, err := pgstore.Open(context.Background(), testenv.PostgresURL(t), &pgstore.Config{Schema: schema})
		if err == nil {
			err = s.Close()
		}
		return err
	},
}

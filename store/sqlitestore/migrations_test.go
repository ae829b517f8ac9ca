package sqlitestore_test

import (
	"os"
	"testing"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store/sqlitestore"
)

// TestMigrationsNumberedByPosition: a schema's version is the count of the
// migrations applied in file-name order, so the files must be numbered
// 001, 002, … without gaps or twins, and SchemaVersion must be the last
// number. Two branches that each add a migration fail here until one is
// renumbered, instead of a migrated database skipping one of them.
func TestMigrationsNumberedByPosition(t *testing.T) {
	names, _, err := sqlq.Migrations(os.DirFS("."))
	if err != nil {
		t.Fatal(err)
	}
	if err := sqlq.CheckNumbering(names); err != nil {
		t.Error(err)
	}
	if got := sqlitestore.SchemaVersion(); got != len(names) {
		t.Errorf("SchemaVersion() = %d, want %d", got, len(names))
	}
}

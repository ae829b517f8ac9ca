package sqlitestore_test

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/store/sqlitestore"
)

// TestMigrationsNumberedByPosition: a schema's version is the count of the
// migrations applied in file-name order, so the files must be numbered
// 001, 002, … without gaps or twins, and SchemaVersion must be the last
// number. Two branches that each add a migration fail here until one is
// renumbered, instead of a migrated database skipping one of them.
func TestMigrationsNumberedByPosition(t *testing.T) {
	entries, err := os.ReadDir("migrations")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	for i, n := range names {
		if want := fmt.Sprintf("%03d_", i+1); !strings.HasPrefix(n, want) {
			t.Errorf("migration %d is %s, want a name starting with %s", i+1, n, want)
		}
	}
	if got := sqlitestore.SchemaVersion(); got != len(names) {
		t.Errorf("SchemaVersion() = %d, want %d", got, len(names))
	}
}

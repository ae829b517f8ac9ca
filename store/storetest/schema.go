package storetest

import (
	"errors"
	"fmt"
	"testing"

	"github.com/idemhq/idem/store"
)

// Schema tells the suite how to open the store on a database whose schema
// is recorded at a given version, so that it checks Open's verdicts: a
// missing schema, or one older than the store's package, is refused with
// an error wrapping store.ErrNotMigrated; the package's own version is
// accepted; and, when the store refuses newer schemas, a newer one is
// refused with an error wrapping store.ErrSchemaTooNew. Nil skips the
// check: a store without a schema (memstore).
type Schema struct {
	// Version is the schema version the store's package migrates to (its
	// SchemaVersion). Required, at least 1.
	Version int

	// OpenAt must make a fresh database whose schema is recorded at
	// version v (0: no schema of Idem's at all; Version+1: a version only
	// a newer Idem knows), open the store on it as a deployment that runs
	// `idem migrate` as a step of its own does (the store's migration
	// turned off), close the store if Open returned one, and return Open's
	// error. Required.
	OpenAt func(t *testing.T, v int) error

	// RefusesNewer is true when Open refuses a schema newer than Version.
	// False skips that check: such a store only checks that no migration
	// is missing.
	RefusesNewer bool
}

// validate reports an incomplete s.
func (s *Schema) validate() error {
	switch {
	case s == nil:
		return nil
	case s.Version < 1:
		return fmt.Errorf("Features.Schema.Version is %d: give the store package's schema version", s.Version)
	case s.OpenAt == nil:
		return errors.New("Features.Schema.OpenAt is nil: say how to open the store on a schema at a version")
	}
	return nil
}

// testSchemaVersionChecked checks Open's verdict on a schema at each
// version around the package's own: the sentinels are what a caller (the
// CLI, an operator's script) tests with errors.Is whatever the store.
func testSchemaVersionChecked(t *testing.T, sc *Schema) {
	cases := []struct {
		name     string
		version  int
		want     error
		wantName string
	}{
		{"missing", 0, store.ErrNotMigrated, "store.ErrNotMigrated"},
		{"older", sc.Version - 1, store.ErrNotMigrated, "store.ErrNotMigrated"},
		{"current", sc.Version, nil, ""},
		{"newer", sc.Version + 1, store.ErrSchemaTooNew, "store.ErrSchemaTooNew"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if c.want == store.ErrSchemaTooNew && !sc.RefusesNewer {
				t.Skip("Features.Schema.RefusesNewer is false: the store accepts a newer schema")
			}
			err := sc.OpenAt(t, c.version)
			switch {
			case c.want == nil && err != nil:
				t.Fatalf("open on a schema at version %d, the package's own: got error %v, want nil", c.version, err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Fatalf("open on a schema at version %d (package version %d) without migrating: got error %v, want one wrapping %s",
					c.version, sc.Version, err, c.wantName)
			}
		})
	}
}

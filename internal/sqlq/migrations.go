package sqlq

import (
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
)

// Migrations returns the names and bodies of the migrations in fsys, the
// files migrations/*.sql, in name order: a schema's version is the number
// of them applied in that order.
func Migrations(fsys fs.FS) (names, bodies []string, err error) {
	names, err = fs.Glob(fsys, "migrations/*.sql")
	if err != nil {
		return nil, nil, err
	}
	slices.Sort(names)
	bodies = make([]string, len(names))
	for i, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return nil, nil, err
		}
		bodies[i] = string(b)
	}
	return names, bodies, nil
}

// SchemaVersion is the version of the schema the migrations in fsys build:
// their number, 0 when they cannot be read.
func SchemaVersion(fsys fs.FS) int {
	names, _, _ := Migrations(fsys)
	return len(names)
}

// CheckNumbering reports the first of names, in order, that is not
// numbered by its position (001_, 002_, …): two branches that each add a
// migration then fail a test until one is renumbered, instead of a
// migrated database skipping one of them.
func CheckNumbering(names []string) error {
	for i, n := range names {
		if want := fmt.Sprintf("%03d_", i+1); !strings.HasPrefix(path.Base(n), want) {
			return fmt.Errorf("migration %d is %s, want a name starting with %s", i+1, n, want)
		}
	}
	return nil
}

package sqlq

import (
	"slices"
	"testing"
	"testing/fstest"
)

func TestMigrationsInNameOrder(t *testing.T) {
	fsys := fstest.MapFS{
		"migrations/002_b.sql":   {Data: []byte("B")},
		"migrations/001_a.sql":   {Data: []byte("A")},
		"migrations/notes.txt":   {Data: []byte("x")},
		"migrations/sub/003.sql": {Data: []byte("C")},
	}
	names, bodies, err := Migrations(fsys)
	if err != nil {
		t.Fatalf("got error %v, want nil", err)
	}
	if want := []string{"migrations/001_a.sql", "migrations/002_b.sql"}; !slices.Equal(names, want) {
		t.Errorf("names: got %q, want %q", names, want)
	}
	if want := []string{"A", "B"}; !slices.Equal(bodies, want) {
		t.Errorf("bodies: got %q, want %q", bodies, want)
	}
	if got := SchemaVersion(fsys); got != 2 {
		t.Errorf("SchemaVersion: got %d, want 2", got)
	}
}

func TestCheckNumbering(t *testing.T) {
	for _, c := range []struct {
		names []string
		ok    bool
	}{
		{nil, true},
		{[]string{"migrations/001_a.sql", "migrations/002_b.sql"}, true},
		{[]string{"001_a.sql", "003_c.sql"}, false},
		{[]string{"001_a.sql", "001_b.sql"}, false},
		{[]string{"1_a.sql"}, false},
	} {
		if err := CheckNumbering(c.names); (err == nil) != c.ok {
			t.Errorf("CheckNumbering(%q): got %v, want ok %v", c.names, err, c.ok)
		}
	}
}

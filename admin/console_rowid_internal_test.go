package admin

import (
	"regexp"
	"testing"
)

// Row ids are valid HTML ids free of the item's text, and distinct for
// distinct items, hostile ones included.
func TestRowID(t *testing.T) {
	t.Parallel()
	valid := regexp.MustCompile(`^row-timer-[0-9a-f]{16}$`)
	items := [][]string{{"order", "a\x00b", "n"}, {"order", "a", "\x00b"}, {"order", "a", "b", "n"}, {"order", "\xff\xfe", "n"},
		{"order", "<script>alert(1)</script>", "n"}, {"order", "", "n"}, {"", "order", "n"}}
	seen := map[string][]string{}
	for _, parts := range items {
		id := rowID("timer", parts...)
		if !valid.MatchString(id) {
			t.Errorf("rowID(%q) = %q: want row-timer- and 16 hex digits", parts, id)
		}
		if prev, dup := seen[id]; dup {
			t.Errorf("rowID(%q) = rowID(%q) = %q", parts, prev, id)
		}
		seen[id] = parts
	}
	// The same item has the same id on every render (a refresh matches it).
	if a, b := rowID("timer", "order", "k", "n"), rowID("timer", "order", "k"+"", "n"); a != b {
		t.Errorf("rowID of one item: %q then %q", a, b)
	}
}

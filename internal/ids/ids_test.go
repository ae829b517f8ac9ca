package ids

import (
	"regexp"
	"testing"
)

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestDerive(t *testing.T) {
	a := Derive("emit", "m1", "order", "k", "0")
	if b := Derive("emit", "m1", "order", "k", "0"); a != b {
		t.Fatalf("not deterministic: %s != %s", a, b)
	}
	if !uuidRE.MatchString(a) {
		t.Fatalf("got %q, want a version-8 UUID", a)
	}
	distinct := map[string][]string{}
	for _, parts := range [][]string{{"ab", "c"}, {"a", "bc"}, {"emit", "m1", "order", "k", "1"}, {"emit", "m2", "order", "k", "0"}, {"emit", "m1", "order", "k", "0"}} {
		id := Derive(parts...)
		if prev, ok := distinct[id]; ok {
			t.Fatalf("collision: %v and %v both give %s", prev, parts, id)
		}
		distinct[id] = parts
	}
}

package history

import (
	"strings"
	"testing"

	"github.com/idemhq/idem/store"
)

func TestDiff(t *testing.T) {
	for _, tt := range []struct {
		name          string
		before, after string
		limit         int
		want          string
		wantTruncated bool
	}{
		{"change", `{"a":1,"b":"x"}`, `{"a":2,"b":"x"}`, 4096, `[{"op":"replace","path":"/a","value":2}]`, false},
		{"new saga", ``, `{"a":1}`, 4096, `[{"op":"add","path":"/a","value":1}]`, false},
		{"equal", `{"a":1}`, `{"a":1}`, 4096, ``, false},
		{"not JSON", `{"a":1}`, `not json`, 4096, ``, false},
		{"cut to the ops that fit", `{}`, `{"a":1,"b":"` + strings.Repeat("x", 20) + `"}`, 40, `[{"op":"add","path":"/a","value":1}]`, true},
		{"null value kept", `{"a":1}`, `{"a":null}`, 4096, `[{"op":"replace","path":"/a","value":null}]`, false},
		{"remove", `{"a":1,"b":2}`, `{"b":2}`, 4096, `[{"op":"remove","path":"/a"}]`, false},
		{"first op too big", `{}`, `{"a":"` + strings.Repeat("x", 100) + `"}`, 40, ``, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, cut := Diff([]byte(tt.before), []byte(tt.after), tt.limit)
			if string(got) != tt.want || cut != tt.wantTruncated {
				t.Errorf("Diff(%s, %s, %d): got %s (truncated %v), want %s (truncated %v)", tt.before, tt.after, tt.limit, got, cut, tt.want, tt.wantTruncated)
			}
		})
	}
}

// FillDiffs computes each entry's change from the State of the entry just
// before it, and leaves an entry without a diff whenever the state before
// it is not known for certain.
func TestFillDiffs(t *testing.T) {
	entry := func(version int64, state string, truncated bool) store.JournalEntry {
		j := store.JournalEntry{Version: version}
		if state != "" {
			j.State, j.StateTruncated = []byte(state), truncated
		}
		return j
	}
	js := []store.JournalEntry{
		entry(1, `{"a":1}`, false),      // a saga's first step: from nothing
		entry(2, `{"a":2}`, false),      // from version 1
		entry(4, `{"a":3}`, false),      // version 3 is missing: unknown before
		entry(5, `{"a":3,"b":1}`, true), // its own state is cut
		entry(6, `{"a":4}`, false),      // the state before it is cut
		entry(7, ``, false),             // recorded no state (capture off)
		entry(8, `{"a":5}`, false),      // the entry before it recorded none
		{Version: 9, JournalDetail: store.JournalDetail{State: []byte(`{"a":6}`), Diff: []byte(`[{"op":"test","path":"/a","value":5}]`)}}, // an old engine's diff is kept
		entry(10, `{"a":6}`, false), // no change: no diff
	}
	FillDiffs(js, 4096)
	want := []string{
		`[{"op":"add","path":"/a","value":1}]`,
		`[{"op":"replace","path":"/a","value":2}]`,
		``, ``, ``, ``, ``,
		`[{"op":"test","path":"/a","value":5}]`,
		``,
	}
	for i := range js {
		if string(js[i].Diff) != want[i] {
			t.Errorf("entry %d (version %d): diff %s, want %s", i, js[i].Version, js[i].Diff, want[i])
		}
	}
	// One commit applied two messages to a new saga, then two to it again:
	// the second of each diffs from the first, not from nothing.
	batch := []store.JournalEntry{entry(1, `{"a":1}`, false), entry(1, `{"a":1,"b":2}`, false), entry(2, `{"a":2,"b":2}`, false), entry(2, `{"a":3,"b":2}`, false)}
	FillDiffs(batch, 4096)
	for i, want := range []string{`[{"op":"add","path":"/a","value":1}]`, `[{"op":"add","path":"/b","value":2}]`, `[{"op":"replace","path":"/a","value":2}]`, `[{"op":"replace","path":"/a","value":3}]`} {
		if string(batch[i].Diff) != want {
			t.Errorf("batch entry %d (version %d): diff %s, want %s", i, batch[i].Version, batch[i].Diff, want)
		}
	}
	// Only the first entries given: the oldest given entry of a longer
	// journal has no known state before it.
	tail := []store.JournalEntry{entry(2, `{"a":2}`, false), entry(3, `{"a":3}`, false)}
	FillDiffs(tail, 4096)
	if tail[0].Diff != nil || string(tail[1].Diff) != `[{"op":"replace","path":"/a","value":3}]` {
		t.Errorf("tail: diffs %s and %s, want none and the replace of /a", tail[0].Diff, tail[1].Diff)
	}
}

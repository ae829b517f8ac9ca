package storetest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// markOf counts the dead letters q selects and returns the count's mark.
func markOf(t *testing.T, s store.Store, q store.DeadLetterQuery) string {
	t.Helper()
	c, err := s.(store.DeadLetterQuerier).CountDeadLetters(t.Context(), &q)
	if err != nil {
		t.Fatalf("count dead letters %+v: %v", q, err)
	}
	return c.AsOf
}

// testDeadLetterArchivalMark checks that a mark binds the archival state
// too: a dead letter archived or restored after a count is neither
// selected nor archived or restored as of that count, so that a bulk
// action acts on at most what was counted.
func testDeadLetterArchivalMark(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	seedTriage(t, s, t0)
	archive(t, s, store.ArchiveParams{IDs: []string{"d-0", "d-1"}, At: t0})
	unarchived := markOf(t, s, store.DeadLetterQuery{}) // counts d-2, d-3, d-4
	ar := s.(store.DeadLetterArchiver)
	if n, err := ar.RestoreDeadLetters(t.Context(), &store.ArchiveParams{IDs: []string{"d-0"}}); err != nil || n != 1 {
		t.Fatalf("restore d-0 after the count: got %d, %v; want 1, nil", n, err)
	}
	if got := queryAll(t, s, store.DeadLetterQuery{AsOf: unarchived}); !slices.Equal(got, []string{"d-2", "d-3", "d-4"}) {
		t.Errorf("unarchived as of the count, d-0 restored since: got %v, want [d-2 d-3 d-4]", got)
	}
	if got := countAll(t, s, store.DeadLetterQuery{AsOf: unarchived}); !maps.Equal(got, map[string]int{"handler_failed": 1, "unknown_type": 2}) {
		t.Errorf("count as of the count, d-0 restored since: got %v, want handler_failed: 1, unknown_type: 2", got)
	}
	if n := archive(t, s, store.ArchiveParams{IDs: []string{"d-0", "d-2"}, AsOf: unarchived, At: t0}); n != 1 {
		t.Errorf("archive d-0 (restored since the count) and d-2 as of the count: got %d, want 1", n)
	}
	if getDeadLetter(t, s, "d-0").Archived() {
		t.Errorf("d-0, restored since the count, was archived as of the count")
	}
	archivedMark := markOf(t, s, store.DeadLetterQuery{Archived: store.ArchivedOnly}) // counts d-1, d-2
	archive(t, s, store.ArchiveParams{IDs: []string{"d-3"}, At: t0})
	if got := queryAll(t, s, store.DeadLetterQuery{AsOf: archivedMark, Archived: store.ArchivedOnly}); !slices.Equal(got, []string{"d-1", "d-2"}) {
		t.Errorf("archived as of the count, d-3 archived since: got %v, want [d-1 d-2]", got)
	}
	if n, err := ar.RestoreDeadLetters(t.Context(), &store.ArchiveParams{IDs: []string{"d-1", "d-3"}, AsOf: archivedMark}); err != nil || n != 1 {
		t.Errorf("restore d-1 and d-3 (archived since the count) as of the count: got %d, %v; want 1, nil", n, err)
	}
	if !getDeadLetter(t, s, "d-3").Archived() {
		t.Errorf("d-3, archived since the count, was restored as of the count")
	}
	if got := queryAll(t, s, store.DeadLetterQuery{AsOf: unarchived, Archived: store.ArchivedInclude}); !slices.Equal(got, []string{"d-0", "d-1", "d-2", "d-3", "d-4"}) {
		t.Errorf("archived included as of the first count: got %v, want all five (archival does not matter)", got)
	}
}

// testDeadLetterPurgeKeepsRestored checks that a dead letter restored
// between the count of a purge and its delete is kept.
func testDeadLetterPurgeKeepsRestored(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	seedTriage(t, s, t0)
	archive(t, s, store.ArchiveParams{IDs: []string{"d-0", "d-1"}, At: t0})
	mark := markOf(t, s, store.DeadLetterQuery{ArchivedBefore: t0.Add(time.Minute)})
	if n, err := s.(store.DeadLetterArchiver).RestoreDeadLetters(t.Context(), &store.ArchiveParams{IDs: []string{"d-1"}}); err != nil || n != 1 {
		t.Fatalf("restore d-1: got %d, %v; want 1, nil", n, err)
	}
	n, err := s.(store.DeadLetterQuerier).DeleteDeadLettersAsOf(t.Context(), []string{"d-0", "d-1"}, mark)
	if err != nil || n != 1 {
		t.Errorf("delete d-0 and d-1 (restored since the count) as of the count: got %d, %v; want 1, nil", n, err)
	}
	if got := queryAll(t, s, store.DeadLetterQuery{Archived: store.ArchivedInclude}); !slices.Equal(got, []string{"d-1", "d-2", "d-3", "d-4"}) {
		t.Errorf("after the purge: got %v, want [d-1 d-2 d-3 d-4] (d-1 restored, kept)", got)
	}
}

package storetest

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var deadLetterTriageCases = []testCase{
	{"DeadLetterFingerprintRecorded", testDeadLetterFingerprintRecorded},
	{"DeadLetterGroupsByFingerprint", testDeadLetterGroups},
	{"DeadLetterGroupsHonourFilters", testDeadLetterGroupsFiltered},
	{"DeadLetterArchiveAndRestore", testDeadLetterArchiveRestore},
	{"DeadLetterArchiveBoundToMark", testDeadLetterArchiveMark},
	{"DeadLetterRecordedAgainIsRestored", testDeadLetterRecordedAgainRestored},
	{"DeadLetterArchivedBefore", testDeadLetterArchivedBefore},
	{"DeadLetterTriageHostile", testDeadLetterTriageHostile},
	{"DeadLetterReplayRecordsWho", testDeadLetterReplayWho},
	{"DeadLetterArchivalBoundToMark", testDeadLetterArchivalMark},
	{"DeadLetterPurgeKeepsRestored", testDeadLetterPurgeKeepsRestored},
}

// seedTriage records five dead letters at t0, t0+1m, …: d-0..d-2 fail
// with one error that differs by the order number (one fingerprint), d-3
// and d-4 with another reason; d-4 is of saga type "b", the rest "a".
func seedTriage(t *testing.T, s store.Store, t0 time.Time) []store.DeadLetter {
	t.Helper()
	var dls []store.DeadLetter
	for i := range 5 {
		at := t0.Add(time.Duration(i) * time.Minute)
		d := deadLetterAt(fmt.Sprintf("d-%d", i), "handler_failed", fmt.Sprintf("charge order %d: card declined", 1000+i), at)
		if i >= 3 {
			d.Reason, d.Error = "unknown_type", fmt.Sprintf(`no handler for "Evt%d"`, i)
		}
		if i == 4 {
			d.SagaType = "b"
		}
		dls = append(dls, d)
	}
	commit(t, s, &store.Changes{DeadLetters: dls})
	return dls
}

func groups(t *testing.T, s store.Store, q readmodel.DeadLetterQuery) []readmodel.DeadLetterGroup {
	t.Helper()
	gs, err := s.(readmodel.DeadLetterGrouper).GroupDeadLetters(t.Context(), &q)
	if err != nil {
		t.Fatalf("group dead letters %+v: got error %v, want nil", q, err)
	}
	return gs
}

func countAll(t *testing.T, s store.Store, q readmodel.DeadLetterQuery) map[string]int {
	t.Helper()
	c, err := s.(readmodel.DeadLetterQuerier).CountDeadLetters(t.Context(), &q)
	if err != nil {
		t.Fatalf("count dead letters %+v: got error %v, want nil", q, err)
	}
	return c.ByReason
}

func testDeadLetterFingerprintRecorded(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	d := deadLetterAt("d-1", "handler_failed", "charge order 7: card declined", t0)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{d}})
	if got, want := getDeadLetter(t, s, "d-1").Fingerprint, store.Fingerprint(d.Reason, d.Error); got != want {
		t.Errorf("fingerprint after recording: got %q, want %q", got, want)
	}
	d.Error, d.LastFailedAt = "charge order 7: card expired", t0.Add(time.Minute)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{d}})
	if got, want := getDeadLetter(t, s, "d-1").Fingerprint, store.Fingerprint(d.Reason, d.Error); got != want {
		t.Errorf("fingerprint after recording again with another error: got %q, want %q (the latest failure's)", got, want)
	}
	ds, err := s.(readmodel.DeadLetterQuerier).QueryDeadLetters(t.Context(), &readmodel.DeadLetterQuery{})
	if err != nil || len(ds) != 1 || ds[0].Fingerprint != store.Fingerprint(d.Reason, d.Error) {
		t.Errorf("query: got %+v, %v; want d-1 with its fingerprint", ds, err)
	}
}

func testDeadLetterGroups(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	dls := seedTriage(t, s, t0)
	gs := groups(t, s, readmodel.DeadLetterQuery{})
	declined, unknown := store.Fingerprint("handler_failed", dls[0].Error), store.Fingerprint("unknown_type", dls[3].Error)
	want := []readmodel.DeadLetterGroup{
		{Fingerprint: declined, Reason: "handler_failed", SampleError: dls[2].Error, Count: 3, FirstSeen: t0, LastSeen: t0.Add(2 * time.Minute)},
		{Fingerprint: unknown, Reason: "unknown_type", SampleError: dls[4].Error, Count: 2, FirstSeen: t0.Add(3 * time.Minute), LastSeen: t0.Add(4 * time.Minute)},
	}
	checkGroups(t, "every dead letter", gs, want)
	ids := queryAll(t, s, readmodel.DeadLetterQuery{Fingerprint: declined, Limit: 2})
	if !slices.Equal(ids, []string{"d-0", "d-1", "d-2"}) {
		t.Errorf("query by fingerprint %s: got %v, want [d-0 d-1 d-2]", declined, ids)
	}
	if got := countAll(t, s, readmodel.DeadLetterQuery{Fingerprint: unknown}); !maps.Equal(got, map[string]int{"unknown_type": 2}) {
		t.Errorf("count by fingerprint %s: got %v, want unknown_type: 2", unknown, got)
	}
	if got := queryAll(t, s, readmodel.DeadLetterQuery{Fingerprint: store.FingerprintNone}); len(got) != 0 {
		t.Errorf("query of the dead letters without a fingerprint: got %v, want none", got)
	}
	if got := groups(t, s, readmodel.DeadLetterQuery{Limit: 1}); len(got) != 1 || got[0].Fingerprint != declined {
		t.Errorf("groups with Limit 1: got %+v, want the largest only", got)
	}
}

func checkGroups(t *testing.T, what string, got, want []readmodel.DeadLetterGroup) {
	t.Helper()
	eq := func(a, b readmodel.DeadLetterGroup) bool {
		return a.Fingerprint == b.Fingerprint && a.Reason == b.Reason && a.SampleError == b.SampleError && a.Count == b.Count &&
			a.FirstSeen.Equal(b.FirstSeen) && a.LastSeen.Equal(b.LastSeen)
	}
	if !slices.EqualFunc(got, want, eq) {
		t.Errorf("%s: groups:\n got  %+v\n want %+v", what, got, want)
	}
}

func testDeadLetterGroupsFiltered(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	dls := seedTriage(t, s, t0)
	unknown := store.Fingerprint("unknown_type", dls[3].Error)
	checkGroups(t, "saga type b", groups(t, s, readmodel.DeadLetterQuery{SagaType: "b"}), []readmodel.DeadLetterGroup{
		{Fingerprint: unknown, Reason: "unknown_type", SampleError: dls[4].Error, Count: 1, FirstSeen: dls[4].FirstFailedAt, LastSeen: dls[4].LastFailedAt},
	})
	if err := s.(store.DeadLetterReplayer).BeginReplay(t.Context(), "d-3", t0.Add(time.Hour)); err != nil {
		t.Fatalf("begin replay: %v", err)
	}
	checkGroups(t, "pending", groups(t, s, readmodel.DeadLetterQuery{State: store.DeadLettersPending}), []readmodel.DeadLetterGroup{
		{Fingerprint: unknown, Reason: "unknown_type", SampleError: dls[3].Error, Count: 1, FirstSeen: dls[3].FirstFailedAt, LastSeen: dls[3].LastFailedAt},
	})
	c, err := s.(readmodel.DeadLetterQuerier).CountDeadLetters(t.Context(), &readmodel.DeadLetterQuery{})
	if err != nil {
		t.Fatal(err)
	}
	late := deadLetterAt("d-9", "unknown_type", `no handler for "X"`, t0)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{late}})
	if gs := groups(t, s, readmodel.DeadLetterQuery{AsOf: c.AsOf, Reason: "unknown_type"}); len(gs) != 1 || gs[0].Count != 2 {
		t.Errorf("groups as of a count made before d-9: got %+v, want one group of 2", gs)
	}
	if _, err := s.(readmodel.DeadLetterGrouper).GroupDeadLetters(t.Context(), &readmodel.DeadLetterQuery{AsOf: "not a mark"}); !errors.Is(err, readmodel.ErrBadMark) {
		t.Errorf("groups with a bad mark: got %v, want readmodel.ErrBadMark", err)
	}
}

func archive(t *testing.T, s store.Store, p readmodel.ArchiveParams) int {
	t.Helper()
	n, err := s.(readmodel.DeadLetterArchiver).ArchiveDeadLetters(t.Context(), &p)
	if err != nil {
		t.Fatalf("archive %v: got error %v, want nil", p.IDs, err)
	}
	return n
}

func testDeadLetterArchiveRestore(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	seedTriage(t, s, t0)
	at := t0.Add(30 * time.Minute)
	if n := archive(t, s, readmodel.ArchiveParams{IDs: []string{"d-0", "d-3", "missing"}, At: at}); n != 2 {
		t.Errorf("archive d-0, d-3 and a missing ID: got %d, want 2", n)
	}
	if n := archive(t, s, readmodel.ArchiveParams{IDs: []string{"d-0"}, At: at.Add(time.Minute)}); n != 0 {
		t.Errorf("archive d-0 again: got %d, want 0 (already archived)", n)
	}
	if got := queryAll(t, s, readmodel.DeadLetterQuery{}); !slices.Equal(got, []string{"d-1", "d-2", "d-4"}) {
		t.Errorf("default query after archiving d-0 and d-3: got %v, want [d-1 d-2 d-4]", got)
	}
	if got := queryAll(t, s, readmodel.DeadLetterQuery{Archived: readmodel.ArchivedOnly}); !slices.Equal(got, []string{"d-0", "d-3"}) {
		t.Errorf("archived only: got %v, want [d-0 d-3]", got)
	}
	if got := queryAll(t, s, readmodel.DeadLetterQuery{Archived: readmodel.ArchivedInclude, Limit: 2}); len(got) != 5 {
		t.Errorf("archived included: got %v, want all five", got)
	}
	if got := countAll(t, s, readmodel.DeadLetterQuery{}); !maps.Equal(got, map[string]int{"handler_failed": 2, "unknown_type": 1}) {
		t.Errorf("count without the archived: got %v, want handler_failed: 2, unknown_type: 1", got)
	}
	if gs := groups(t, s, readmodel.DeadLetterQuery{Archived: readmodel.ArchivedOnly}); len(gs) != 2 || gs[0].Count+gs[1].Count != 2 {
		t.Errorf("groups of the archived: got %+v, want two groups of one", gs)
	}
	d := getDeadLetter(t, s, "d-0")
	if !d.Archived() || !d.ArchivedAt.Equal(at) {
		t.Errorf("d-0 after archiving: ArchivedAt %v, want %v", d.ArchivedAt, at)
	}
	n, err := s.(readmodel.DeadLetterArchiver).RestoreDeadLetters(t.Context(), &readmodel.ArchiveParams{IDs: []string{"d-0", "d-1", "missing"}})
	if err != nil || n != 1 {
		t.Errorf("restore d-0, d-1 (not archived) and a missing ID: got %d, %v; want 1, nil", n, err)
	}
	if d := getDeadLetter(t, s, "d-0"); d.Archived() {
		t.Errorf("d-0 after restoring: ArchivedAt %v, want zero", d.ArchivedAt)
	}
	if got := queryAll(t, s, readmodel.DeadLetterQuery{}); !slices.Equal(got, []string{"d-0", "d-1", "d-2", "d-4"}) {
		t.Errorf("default query after restoring d-0: got %v, want [d-0 d-1 d-2 d-4]", got)
	}
	if n := archive(t, s, readmodel.ArchiveParams{IDs: []string{"d-1"}}); n != 1 || !getDeadLetter(t, s, "d-1").Archived() {
		t.Errorf("archive d-1 at the zero time: got %d, archived %v; want 1, archived now", n, getDeadLetter(t, s, "d-1").Archived())
	}
}

func testDeadLetterArchiveMark(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	dls := seedTriage(t, s, t0)
	c, err := s.(readmodel.DeadLetterQuerier).CountDeadLetters(t.Context(), &readmodel.DeadLetterQuery{})
	if err != nil {
		t.Fatal(err)
	}
	again := dls[1]
	again.LastFailedAt = t0.Add(time.Hour)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{again}})
	if n := archive(t, s, readmodel.ArchiveParams{IDs: []string{"d-0", "d-1"}, AsOf: c.AsOf, At: t0}); n != 1 {
		t.Errorf("archive d-0 and d-1 (recorded again since the count) as of the count: got %d, want 1", n)
	}
	if getDeadLetter(t, s, "d-1").Archived() || !getDeadLetter(t, s, "d-0").Archived() {
		t.Errorf("after archiving as of the count: want d-0 archived and d-1, which failed again since, not")
	}
	if _, err := s.(readmodel.DeadLetterArchiver).ArchiveDeadLetters(t.Context(), &readmodel.ArchiveParams{IDs: []string{"d-2"}, AsOf: "x:y"}); !errors.Is(err, readmodel.ErrBadMark) {
		t.Errorf("archive with a bad mark: got %v, want readmodel.ErrBadMark", err)
	}
	if got := queryAll(t, s, readmodel.DeadLetterQuery{AsOf: c.AsOf, Archived: readmodel.ArchivedInclude}); !slices.Equal(got, []string{"d-0", "d-2", "d-3", "d-4"}) {
		t.Errorf("query as of the count, archived included: got %v, want [d-0 d-2 d-3 d-4] (archiving does not move the mark)", got)
	}
}

func testDeadLetterRecordedAgainRestored(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	dls := seedTriage(t, s, t0)
	archive(t, s, readmodel.ArchiveParams{IDs: []string{"d-0"}, At: t0})
	again := dls[0]
	again.LastFailedAt = t0.Add(time.Hour)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{again}})
	if d := getDeadLetter(t, s, "d-0"); d.Archived() {
		t.Errorf("archived d-0 recorded again (its message failed again): ArchivedAt %v, want zero (restored)", d.ArchivedAt)
	}
}

func testDeadLetterArchivedBefore(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	seedTriage(t, s, t0)
	archive(t, s, readmodel.ArchiveParams{IDs: []string{"d-0"}, At: t0})
	archive(t, s, readmodel.ArchiveParams{IDs: []string{"d-1"}, At: t0.Add(10 * time.Minute)})
	for _, q := range []readmodel.DeadLetterQuery{
		{ArchivedBefore: t0.Add(5 * time.Minute)},
		{ArchivedBefore: t0.Add(5 * time.Minute), Archived: readmodel.ArchivedOnly},
	} {
		if got := queryAll(t, s, q); !slices.Equal(got, []string{"d-0"}) {
			t.Errorf("query archived before t0+5m (Archived %q): got %v, want [d-0]", q.Archived, got)
		}
		if got := countAll(t, s, q); !maps.Equal(got, map[string]int{"handler_failed": 1}) {
			t.Errorf("count archived before t0+5m: got %v, want handler_failed: 1", got)
		}
	}
}

func testDeadLetterTriageHostile(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	// As the engine records error texts: U+0000 spelled \x00, invalid
	// UTF-8 replaced.
	hostile := "<script>alert(1)</script> \\x00 \uFFFD order 12 '\"'"
	d := deadLetterAt("d-h", "handler_failed", hostile, t0)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{d}})
	gs := groups(t, s, readmodel.DeadLetterQuery{})
	if len(gs) != 1 || gs[0].Count != 1 || gs[0].Fingerprint == "" {
		t.Fatalf("groups of a dead letter with a hostile error: got %+v, want one group with a fingerprint", gs)
	}
	if got := queryAll(t, s, readmodel.DeadLetterQuery{Fingerprint: gs[0].Fingerprint}); !slices.Equal(got, []string{"d-h"}) {
		t.Errorf("query by its fingerprint: got %v, want [d-h]", got)
	}
	for _, bad := range []string{"f\x00", "f\xff", "<script>"} {
		if got := groups(t, s, readmodel.DeadLetterQuery{Fingerprint: bad}); len(got) != 0 {
			t.Errorf("groups of fingerprint %q: got %+v, want none", bad, got)
		}
		if got := queryAll(t, s, readmodel.DeadLetterQuery{Fingerprint: bad}); len(got) != 0 {
			t.Errorf("query of fingerprint %q: got %v, want none", bad, got)
		}
		if n := archive(t, s, readmodel.ArchiveParams{IDs: []string{bad}}); n != 0 {
			t.Errorf("archive ID %q: got %d, want 0", bad, n)
		}
		if n, err := s.(readmodel.DeadLetterArchiver).RestoreDeadLetters(t.Context(), &readmodel.ArchiveParams{IDs: []string{bad}}); err != nil || n != 0 {
			t.Errorf("restore ID %q: got %d, %v; want 0, nil", bad, n, err)
		}
	}
}

func testDeadLetterReplayWho(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	seedTriage(t, s, t0)
	rp := s.(store.DeadLetterReplayer)
	if err := rp.BeginReplay(store.WithReplayBy(t.Context(), "cli: <alice>@host"), "d-0", t0.Add(time.Minute)); err != nil {
		t.Fatalf("begin replay: %v", err)
	}
	if err := rp.SettleReplays(t.Context(), &store.SettleReplaysParams{IDs: []string{"d-0"}, Outcome: store.ReplayNotSent, At: t0.Add(2 * time.Minute), Error: "down"}); err != nil {
		t.Fatal(err)
	}
	if err := rp.BeginReplay(t.Context(), "d-0", t0.Add(3*time.Minute)); err != nil {
		t.Fatalf("begin second replay: %v", err)
	}
	rs := getDeadLetter(t, s, "d-0").Replays
	if len(rs) != 2 || rs[0].By != "cli: <alice>@host" || rs[1].By != "" {
		t.Errorf("replays: got %+v, want the first by cli: <alice>@host and the second by nobody known", rs)
	}
}

// markOf counts the dead letters q selects and returns the count's mark.
func markOf(t *testing.T, s store.Store, q readmodel.DeadLetterQuery) string {
	t.Helper()
	c, err := s.(readmodel.DeadLetterQuerier).CountDeadLetters(t.Context(), &q)
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
	archive(t, s, readmodel.ArchiveParams{IDs: []string{"d-0", "d-1"}, At: t0})
	unarchived := markOf(t, s, readmodel.DeadLetterQuery{}) // counts d-2, d-3, d-4
	ar := s.(readmodel.DeadLetterArchiver)
	if n, err := ar.RestoreDeadLetters(t.Context(), &readmodel.ArchiveParams{IDs: []string{"d-0"}}); err != nil || n != 1 {
		t.Fatalf("restore d-0 after the count: got %d, %v; want 1, nil", n, err)
	}
	if got := queryAll(t, s, readmodel.DeadLetterQuery{AsOf: unarchived}); !slices.Equal(got, []string{"d-2", "d-3", "d-4"}) {
		t.Errorf("unarchived as of the count, d-0 restored since: got %v, want [d-2 d-3 d-4]", got)
	}
	if got := countAll(t, s, readmodel.DeadLetterQuery{AsOf: unarchived}); !maps.Equal(got, map[string]int{"handler_failed": 1, "unknown_type": 2}) {
		t.Errorf("count as of the count, d-0 restored since: got %v, want handler_failed: 1, unknown_type: 2", got)
	}
	if n := archive(t, s, readmodel.ArchiveParams{IDs: []string{"d-0", "d-2"}, AsOf: unarchived, At: t0}); n != 1 {
		t.Errorf("archive d-0 (restored since the count) and d-2 as of the count: got %d, want 1", n)
	}
	if getDeadLetter(t, s, "d-0").Archived() {
		t.Errorf("d-0, restored since the count, was archived as of the count")
	}
	archivedMark := markOf(t, s, readmodel.DeadLetterQuery{Archived: readmodel.ArchivedOnly}) // counts d-1, d-2
	archive(t, s, readmodel.ArchiveParams{IDs: []string{"d-3"}, At: t0})
	if got := queryAll(t, s, readmodel.DeadLetterQuery{AsOf: archivedMark, Archived: readmodel.ArchivedOnly}); !slices.Equal(got, []string{"d-1", "d-2"}) {
		t.Errorf("archived as of the count, d-3 archived since: got %v, want [d-1 d-2]", got)
	}
	if n, err := ar.RestoreDeadLetters(t.Context(), &readmodel.ArchiveParams{IDs: []string{"d-1", "d-3"}, AsOf: archivedMark}); err != nil || n != 1 {
		t.Errorf("restore d-1 and d-3 (archived since the count) as of the count: got %d, %v; want 1, nil", n, err)
	}
	if !getDeadLetter(t, s, "d-3").Archived() {
		t.Errorf("d-3, archived since the count, was restored as of the count")
	}
	if got := queryAll(t, s, readmodel.DeadLetterQuery{AsOf: unarchived, Archived: readmodel.ArchivedInclude}); !slices.Equal(got, []string{"d-0", "d-1", "d-2", "d-3", "d-4"}) {
		t.Errorf("archived included as of the first count: got %v, want all five (archival does not matter)", got)
	}
}

// testDeadLetterPurgeKeepsRestored checks that a dead letter restored
// between the count of a purge and its delete is kept.
func testDeadLetterPurgeKeepsRestored(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	seedTriage(t, s, t0)
	archive(t, s, readmodel.ArchiveParams{IDs: []string{"d-0", "d-1"}, At: t0})
	mark := markOf(t, s, readmodel.DeadLetterQuery{ArchivedBefore: t0.Add(time.Minute)})
	if n, err := s.(readmodel.DeadLetterArchiver).RestoreDeadLetters(t.Context(), &readmodel.ArchiveParams{IDs: []string{"d-1"}}); err != nil || n != 1 {
		t.Fatalf("restore d-1: got %d, %v; want 1, nil", n, err)
	}
	n, err := s.(readmodel.DeadLetterQuerier).DeleteDeadLettersAsOf(t.Context(), []string{"d-0", "d-1"}, mark)
	if err != nil || n != 1 {
		t.Errorf("delete d-0 and d-1 (restored since the count) as of the count: got %d, %v; want 1, nil", n, err)
	}
	if got := queryAll(t, s, readmodel.DeadLetterQuery{Archived: readmodel.ArchivedInclude}); !slices.Equal(got, []string{"d-1", "d-2", "d-3", "d-4"}) {
		t.Errorf("after the purge: got %v, want [d-1 d-2 d-3 d-4] (d-1 restored, kept)", got)
	}
}

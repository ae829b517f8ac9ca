package storetest

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var deadLetterStateCases = []testCase{
	{"DeadLetterMessageTypeSelected", testDeadLetterMessageType},
	{"DeadLetterMessageTypeHostile", testDeadLetterMessageTypeHostile},
	{"DeadLetterStateKeptThroughReplays", testDeadLetterStateKept},
	{"DeadLetterGroupsFollowWrites", testDeadLetterGroupsFollowWrites},
	{"DeadLetterUnresolvedCounted", testDeadLetterUnresolvedCounted},
}

// typedDeadLetter is a dead letter of message type typ.
func typedDeadLetter(id, typ, reason string, at time.Time) store.DeadLetter {
	d := deadLetterAt(id, reason, "e", at)
	d.Envelope.Type = typ
	return d
}

// groupCounts is the count of each group of gs, by reason.
func groupCounts(gs []readmodel.DeadLetterGroup) map[string]int {
	m := map[string]int{}
	for _, g := range gs {
		m[g.Reason] += g.Count
	}
	return m
}

// checkSelection checks that q selects exactly want (sorted IDs) in a
// query, a count and the groups, with want's reasons in reasons.
func checkSelection(t *testing.T, s store.Store, what string, q readmodel.DeadLetterQuery, want []string, reasons map[string]string) {
	t.Helper()
	if got := queryAll(t, s, q); !slices.Equal(got, want) {
		t.Errorf("%s: query: got %v, want %v", what, got, want)
	}
	wantBy := map[string]int{}
	for _, id := range want {
		wantBy[reasons[id]]++
	}
	if got := countAll(t, s, q); !maps.Equal(got, wantBy) {
		t.Errorf("%s: count: got %v, want %v", what, got, wantBy)
	}
	q.Limit = 0 // a page's size, not a bound on the groups
	if got := groupCounts(groups(t, s, q)); !maps.Equal(got, wantBy) {
		t.Errorf("%s: groups: got %v, want %v", what, got, wantBy)
	}
}

// testDeadLetterMessageType: DeadLetterQuery.MessageType selects by the
// envelope's type in queries, counts and groups, within the other
// filters and a mark, and follows a dead letter recorded again with
// another type.
func testDeadLetterMessageType(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	dls := []store.DeadLetter{
		typedDeadLetter("a-1", "orders.Placed", "malformed_body", t0),
		typedDeadLetter("a-2", "orders.Placed", "permanent_error", t0),
		typedDeadLetter("b-1", "orders.Shipped", "malformed_body", t0),
		typedDeadLetter("c-1", "orders.Placed.v2", "malformed_body", t0),
	}
	reasons := map[string]string{}
	for _, d := range dls {
		reasons[d.ID] = d.Reason
	}
	commit(t, s, &store.Changes{DeadLetters: dls})
	checkSelection(t, s, "orders.Placed", readmodel.DeadLetterQuery{MessageType: "orders.Placed"}, []string{"a-1", "a-2"}, reasons)
	checkSelection(t, s, "orders.Placed, malformed_body", readmodel.DeadLetterQuery{MessageType: "orders.Placed", Reason: "malformed_body"}, []string{"a-1"}, reasons)
	checkSelection(t, s, "orders.Placed, paged by one", readmodel.DeadLetterQuery{MessageType: "orders.Placed", Limit: 1}, []string{"a-1", "a-2"}, reasons)
	checkSelection(t, s, "no such type", readmodel.DeadLetterQuery{MessageType: "orders"}, nil, reasons)

	c, err := s.(readmodel.DeadLetterQuerier).CountDeadLetters(t.Context(), &readmodel.DeadLetterQuery{MessageType: "orders.Placed"})
	if err != nil {
		t.Fatalf("count: got error %v, want nil", err)
	}
	// a-2 fails again with another type; b-1 becomes an orders.Placed.
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{
		typedDeadLetter("a-2", "orders.Cancelled", "permanent_error", t0.Add(time.Minute)),
		typedDeadLetter("b-1", "orders.Placed", "malformed_body", t0.Add(time.Minute)),
	}})
	checkSelection(t, s, "orders.Placed after recording again", readmodel.DeadLetterQuery{MessageType: "orders.Placed"}, []string{"a-1", "b-1"}, reasons)
	checkSelection(t, s, "orders.Cancelled after recording again", readmodel.DeadLetterQuery{MessageType: "orders.Cancelled"}, []string{"a-2"}, reasons)
	// As of the count, only a-1 is still what was counted.
	checkSelection(t, s, "orders.Placed as of the count", readmodel.DeadLetterQuery{MessageType: "orders.Placed", AsOf: c.AsOf}, []string{"a-1"}, reasons)
}

// testDeadLetterMessageTypeHostile: a type with markup or a U+0000
// elsewhere in the envelope is selected by its type; a filter that holds
// U+0000 or invalid UTF-8 selects nothing, without an error.
func testDeadLetterMessageTypeHostile(t *testing.T, s store.Store) {
	t0 := now().Add(-time.Hour)
	script := typedDeadLetter("script", `<script>alert("x")</script>`, "malformed_body", t0)
	nulHeader := typedDeadLetter("nul-header", "orders.Placed", "malformed_body", t0)
	nulHeader.Envelope.Headers = map[string]string{"x-bad\x00key": "v\x00alue"}
	nulType := typedDeadLetter("nul-type", "orders.Placed\x00", "malformed_body", t0)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{script, nulHeader, nulType}})
	reasons := map[string]string{"script": "malformed_body", "nul-header": "malformed_body", "nul-type": "malformed_body"}
	checkSelection(t, s, "markup", readmodel.DeadLetterQuery{MessageType: script.Envelope.Type}, []string{"script"}, reasons)
	checkSelection(t, s, "a U+0000 in a header", readmodel.DeadLetterQuery{MessageType: "orders.Placed"}, []string{"nul-header"}, reasons)
	for _, typ := range []string{"orders.Placed\x00", "\x00", "orders.Placed\xff", "\xff"} {
		checkSelection(t, s, "filter "+typ, readmodel.DeadLetterQuery{MessageType: typ}, nil, reasons)
	}
}

// testDeadLetterStateKept: the state filters give, in queries, counts and
// groups, the state each dead letter's own history says, as replays begin
// and settle, dead letters are recorded again (from a replayed copy or
// not), archived and restored.
func testDeadLetterStateKept(t *testing.T, s store.Store) {
	ctx := t.Context()
	rp := s.(store.DeadLetterReplayer)
	t0 := now().Add(-time.Hour)
	ids := []string{"new", "pending", "ok", "failed", "not-sent", "ok-again", "archived", "restored"}
	reasons := map[string]string{}
	var dls []store.DeadLetter
	for _, id := range ids {
		dls = append(dls, typedDeadLetter(id, "orders.Placed", "permanent_error", t0))
		reasons[id] = "permanent_error"
	}
	commit(t, s, &store.Changes{DeadLetters: dls})
	r, done := t0.Add(time.Minute), t0.Add(2*time.Minute)
	for _, id := range ids[1:] {
		if err := rp.BeginReplay(ctx, id, r); err != nil {
			t.Fatalf("begin replay of %s: got error %v, want nil", id, err)
		}
	}
	settle := func(o store.ReplayOutcome, ids ...string) {
		t.Helper()
		if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: ids, Outcome: o, At: done}); err != nil {
			t.Fatalf("settle %v: got error %v, want nil", ids, err)
		}
	}
	settle(store.ReplaySucceeded, "ok", "ok-again", "archived", "restored")
	settle(store.ReplayNotSent, "not-sent")
	// failed: its replayed copy failed again; ok-again: a late copy of the
	// original message failed again, which settles nothing.
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{
		replayedCopy(typedDeadLetter("failed", "orders.Placed", "permanent_error", done)),
		typedDeadLetter("ok-again", "orders.Placed", "permanent_error", done),
	}})
	a := s.(readmodel.DeadLetterArchiver)
	if _, err := a.ArchiveDeadLetters(ctx, &readmodel.ArchiveParams{IDs: []string{"archived", "restored"}}); err != nil {
		t.Fatalf("archive: got error %v, want nil", err)
	}
	if _, err := a.RestoreDeadLetters(ctx, &readmodel.ArchiveParams{IDs: []string{"restored"}}); err != nil {
		t.Fatalf("restore: got error %v, want nil", err)
	}
	// What each dead letter's history says, and what the filters must give.
	want := map[store.DeadLetterState][]string{}
	for _, id := range ids {
		d := getDeadLetter(t, s, id)
		if d.Archived() {
			continue
		}
		want[d.State()] = append(want[d.State()], id)
	}
	for st, w := range map[store.DeadLetterState][]string{
		store.DeadLettersUnresolved: {"failed", "new", "not-sent"},
		store.DeadLettersResolved:   {"ok", "ok-again", "restored"},
		store.DeadLettersPending:    {"pending"},
	} {
		if slices.Sort(want[st]); !slices.Equal(want[st], w) {
			t.Fatalf("state %s by the dead letters' histories: %v, want %v", st, want[st], w)
		}
		checkSelection(t, s, "state "+string(st), readmodel.DeadLetterQuery{State: st}, w, reasons)
		checkSelection(t, s, "state "+string(st)+" of orders.Placed", readmodel.DeadLetterQuery{State: st, MessageType: "orders.Placed"}, w, reasons)
	}
	checkSelection(t, s, "archived, resolved", readmodel.DeadLetterQuery{State: store.DeadLettersResolved, Archived: readmodel.ArchivedOnly}, []string{"archived"}, reasons)
	// A new replay of a resolved one is pending again; its failure makes
	// it unresolved.
	if err := rp.BeginReplay(ctx, "ok", done.Add(time.Minute)); err != nil {
		t.Fatalf("begin second replay of ok: got error %v, want nil", err)
	}
	checkSelection(t, s, "pending after a second replay", readmodel.DeadLetterQuery{State: store.DeadLettersPending}, []string{"ok", "pending"}, reasons)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{replayedCopy(typedDeadLetter("ok", "orders.Placed", "permanent_error", done.Add(2*time.Minute)))}})
	checkSelection(t, s, "unresolved after the second replay failed", readmodel.DeadLetterQuery{State: store.DeadLettersUnresolved}, []string{"failed", "new", "not-sent", "ok"}, reasons)
}

// testDeadLetterGroupsFollowWrites: the groups of the unresolved dead
// letters follow, at once, each write through the store that changes
// them (a store may keep its answers a while, not past its own writes).
func testDeadLetterGroupsFollowWrites(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := now().Add(-time.Hour)
	q := readmodel.DeadLetterQuery{State: store.DeadLettersUnresolved}
	check := func(what string, want int) {
		t.Helper()
		if got := groupCounts(groups(t, s, q))["permanent_error"]; got != want {
			t.Errorf("%s: groups count %d unresolved permanent_error, want %d", what, got, want)
		}
	}
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{typedDeadLetter("a", "orders.Placed", "permanent_error", t0)}})
	check("one recorded", 1)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{typedDeadLetter("b", "orders.Placed", "permanent_error", t0)}})
	check("another recorded", 2)
	a := s.(readmodel.DeadLetterArchiver)
	if _, err := a.ArchiveDeadLetters(ctx, &readmodel.ArchiveParams{IDs: []string{"a"}}); err != nil {
		t.Fatalf("archive: got error %v, want nil", err)
	}
	check("one archived", 1)
	if _, err := a.RestoreDeadLetters(ctx, &readmodel.ArchiveParams{IDs: []string{"a"}}); err != nil {
		t.Fatalf("restore: got error %v, want nil", err)
	}
	check("restored", 2)
	rp := s.(store.DeadLetterReplayer)
	if err := rp.BeginReplay(ctx, "a", t0.Add(time.Minute)); err != nil {
		t.Fatalf("begin replay: got error %v, want nil", err)
	}
	check("one replay pending", 1)
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"a"}, Outcome: store.ReplayNotSent, At: t0.Add(time.Minute)}); err != nil {
		t.Fatalf("settle: got error %v, want nil", err)
	}
	check("its replay not sent", 2)
	// A replay an engine settles as a duplicate in its commit resolves
	// the dead letter: the resolved groups follow at once.
	resolved := func(what string, want int) {
		t.Helper()
		if got := groupCounts(groups(t, s, readmodel.DeadLetterQuery{State: store.DeadLettersResolved}))["permanent_error"]; got != want {
			t.Errorf("%s: groups count %d resolved permanent_error, want %d", what, got, want)
		}
	}
	if err := rp.BeginReplay(ctx, "a", t0.Add(2*time.Minute)); err != nil {
		t.Fatalf("begin replay again: got error %v, want nil", err)
	}
	resolved("replayed again, pending", 0)
	commit(t, s, &store.Changes{SettleDuplicates: &store.SettleReplaysParams{IDs: []string{"a"}, Outcome: store.ReplayDuplicate, At: t0.Add(2 * time.Minute)}})
	resolved("its replay settled a duplicate", 1)
	if _, err := s.DeleteDeadLetters(ctx, []string{"b"}); err != nil {
		t.Fatalf("delete: got error %v, want nil", err)
	}
	check("the other deleted (the first is resolved)", 0)
}

// testDeadLetterUnresolvedCounted: readmodel.UnresolvedCounter counts the
// dead letters neither archived, nor pending a replay, nor resolved by one
// (succeeded or duplicate), up to its bound.
func testDeadLetterUnresolvedCounted(t *testing.T, s store.Store) {
	uc, ok := s.(readmodel.UnresolvedCounter)
	if !ok {
		t.Skip("readmodel.UnresolvedCounter not implemented")
	}
	ctx := t.Context()
	t0 := now().Add(-time.Hour)
	var ds []store.DeadLetter
	for _, id := range []string{"open-1", "open-2", "open-3", "archived", "pending", "succeeded", "duplicate", "not-sent"} {
		ds = append(ds, typedDeadLetter(id, "orders.Placed", "permanent_error", t0))
	}
	commit(t, s, &store.Changes{DeadLetters: ds})
	if _, err := s.(readmodel.DeadLetterArchiver).ArchiveDeadLetters(ctx, &readmodel.ArchiveParams{IDs: []string{"archived"}}); err != nil {
		t.Fatalf("archive: got error %v, want nil", err)
	}
	rp := s.(store.DeadLetterReplayer)
	for _, id := range []string{"pending", "succeeded", "duplicate", "not-sent"} {
		if err := rp.BeginReplay(ctx, id, t0.Add(time.Minute)); err != nil {
			t.Fatalf("begin replay of %s: got error %v, want nil", id, err)
		}
	}
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"succeeded"}, Outcome: store.ReplaySucceeded, At: t0.Add(2 * time.Minute)}); err != nil {
		t.Fatalf("settle succeeded: got error %v, want nil", err)
	}
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"not-sent"}, Outcome: store.ReplayNotSent, At: t0.Add(2 * time.Minute)}); err != nil {
		t.Fatalf("settle not sent: got error %v, want nil", err)
	}
	commit(t, s, &store.Changes{SettleDuplicates: &store.SettleReplaysParams{IDs: []string{"duplicate"}, Outcome: store.ReplayDuplicate, At: t0.Add(2 * time.Minute)}})
	// Unresolved: open-1..3, and not-sent (its replay never went out).
	for _, c := range []struct{ bound, want int }{{100, 4}, {4, 4}, {2, 2}, {0, 0}} {
		if got, err := uc.CountUnresolved(ctx, c.bound); err != nil || got != c.want {
			t.Errorf("CountUnresolved(%d): got %d, %v; want %d", c.bound, got, err, c.want)
		}
	}
}

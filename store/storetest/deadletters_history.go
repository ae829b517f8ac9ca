package storetest

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var deadLetterReplayerCases = []testCase{
	{"DeadLetterKeepsReplayHistory", testDeadLetterReplayHistory},
	{"DeadLetterReplaySettles", testDeadLetterReplaySettles},
	{"DeadLetterHistoryGoesWithIt", testDeadLetterHistoryDeleted},
	{"DeadLetterReplayHostileID", testDeadLetterReplayHostile},
	{"DeadLetterOneReplayPending", testDeadLetterOneReplayPending},
	{"DeadLetterOriginalCopySettlesNothing", testDeadLetterOriginalCopy},
	{"DeadLetterQueryByState", testDeadLetterQueryByState},
	{"DeadLetterReplaySettledInCommit", testDeadLetterReplaySettledInCommit},
}

func deadLetterAt(id, reason, errText string, at time.Time) store.DeadLetter {
	return store.DeadLetter{
		ID: id, Envelope: envelope(id, at), Reason: reason, Error: errText,
		SagaType: "order", Key: "k-" + id, Attempts: 1, FirstFailedAt: at, LastFailedAt: at,
	}
}

// replayedCopy is d recorded again from a replayed copy of its envelope,
// one that carries store.HeaderReplay.
func replayedCopy(d store.DeadLetter) store.DeadLetter {
	d.Envelope.Headers = maps.Clone(d.Envelope.Headers)
	if d.Envelope.Headers == nil {
		d.Envelope.Headers = map[string]string{}
	}
	d.Envelope.Headers[store.HeaderReplay] = d.LastFailedAt.UTC().Format(time.RFC3339Nano)
	return d
}

func getDeadLetter(t *testing.T, s store.Store, id string) *store.DeadLetter {
	t.Helper()
	d, err := s.GetDeadLetter(t.Context(), id)
	if err != nil {
		t.Fatalf("get dead letter %s: got error %v, want nil", id, err)
	}
	return d
}

func checkReplays(t *testing.T, what string, got, want []store.Replay) {
	t.Helper()
	eq := func(a, b store.Replay) bool {
		return a.At.Equal(b.At) && a.Outcome == b.Outcome && a.SettledAt.Equal(b.SettledAt) && a.Reason == b.Reason && a.Error == b.Error
	}
	if !slices.EqualFunc(got, want, eq) {
		t.Errorf("%s: replays:\n got  %+v\n want %+v", what, got, want)
	}
}

// testDeadLetterReplayHistory: a replay is recorded, the dead letter kept,
// and recording it again (it failed again) keeps the first failure and
// settles the replay as failed with the new failure.
func testDeadLetterReplayHistory(t *testing.T, s store.Store) {
	ctx := t.Context()
	rp := s.(store.DeadLetterReplayer)
	t0 := now().Add(-time.Hour)
	first := deadLetterAt("d-1", "unknown_type", "no handler for OrderPlaced", t0)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{first}})
	d := getDeadLetter(t, s, "d-1")
	if d.FirstReason != "unknown_type" || d.FirstError != first.Error || len(d.Replays) != 0 {
		t.Fatalf("new dead letter: first failure %q/%q, %d replays; want unknown_type/%q and none", d.FirstReason, d.FirstError, len(d.Replays), first.Error)
	}

	r1 := t0.Add(time.Minute)
	if err := rp.BeginReplay(ctx, "d-1", r1); err != nil {
		t.Fatalf("begin replay of d-1: got error %v, want nil", err)
	}
	checkReplays(t, "after a replay", getDeadLetter(t, s, "d-1").Replays, []store.Replay{{At: r1, Outcome: store.ReplayPending}})

	again := replayedCopy(deadLetterAt("d-1", "permanent_error", "charge: card declined", r1.Add(time.Second)))
	again.FirstFailedAt = again.LastFailedAt // the engine sets both to now
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{again}})
	d = getDeadLetter(t, s, "d-1")
	want := again
	want.FirstFailedAt = t0
	checkDeadLetter(t, "failed again", *d, want)
	if d.FirstReason != "unknown_type" || d.FirstError != first.Error {
		t.Errorf("failed again: first failure %q/%q, want the first one, unknown_type/%q", d.FirstReason, d.FirstError, first.Error)
	}
	failed := store.Replay{At: r1, Outcome: store.ReplayFailed, SettledAt: again.LastFailedAt, Reason: again.Reason, Error: again.Error}
	checkReplays(t, "failed again", d.Replays, []store.Replay{failed})

	// A second replay, failing again: both are kept, in order, and the
	// list shows them too.
	r2 := r1.Add(time.Hour)
	if err := rp.BeginReplay(ctx, "d-1", r2); err != nil {
		t.Fatalf("begin second replay of d-1: got error %v, want nil", err)
	}
	third := replayedCopy(deadLetterAt("d-1", "retries_exhausted", "timeout", r2.Add(time.Second)))
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{third}})
	wantReplays := []store.Replay{failed, {At: r2, Outcome: store.ReplayFailed, SettledAt: third.LastFailedAt, Reason: third.Reason, Error: third.Error}}
	checkReplays(t, "failed twice", getDeadLetter(t, s, "d-1").Replays, wantReplays)
	list, err := s.ListDeadLetters(ctx, &store.ListParams{Limit: 10})
	if err != nil || len(list) != 1 {
		t.Fatalf("list dead letters: got %d, %v; want 1, nil", len(list), err)
	}
	checkReplays(t, "listed", list[0].Replays, wantReplays)
	if dq, ok := s.(readmodel.DeadLetterQuerier); ok {
		qs, err := dq.QueryDeadLetters(ctx, &readmodel.DeadLetterQuery{Reason: "retries_exhausted"})
		if err != nil || len(qs) != 1 {
			t.Fatalf("query dead letters: got %d, %v; want 1, nil", len(qs), err)
		}
		checkReplays(t, "queried", qs[0].Replays, wantReplays)
	}
	// Recording it again without a replay changes no replay.
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{deadLetterAt("d-1", "x", "y", r2.Add(time.Minute))}})
	checkReplays(t, "recorded again without a replay", getDeadLetter(t, s, "d-1").Replays, wantReplays)
}

// testDeadLetterReplaySettles: SettleReplays settles only a pending latest
// replay, and a settled replay is not settled again by a new failure.
func testDeadLetterReplaySettles(t *testing.T, s store.Store) {
	ctx := t.Context()
	rp := s.(store.DeadLetterReplayer)
	t0 := now().Add(-time.Hour)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{
		deadLetterAt("d-1", "unknown_type", "e", t0), deadLetterAt("d-2", "unknown_type", "e", t0),
	}})
	r := t0.Add(time.Minute)
	for _, id := range []string{"d-1", "d-2"} {
		if err := rp.BeginReplay(ctx, id, r); err != nil {
			t.Fatalf("begin replay of %s: got error %v, want nil", id, err)
		}
	}
	done := r.Add(time.Second)
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"d-1", "no-such-id"}, Outcome: store.ReplaySucceeded, At: done}); err != nil {
		t.Fatalf("settle d-1 as succeeded: got error %v, want nil", err)
	}
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"d-2"}, Outcome: store.ReplayNotSent, At: done, Error: "publish: broker down"}); err != nil {
		t.Fatalf("settle d-2 as not sent: got error %v, want nil", err)
	}
	succeeded := store.Replay{At: r, Outcome: store.ReplaySucceeded, SettledAt: done}
	checkReplays(t, "d-1 succeeded", getDeadLetter(t, s, "d-1").Replays, []store.Replay{succeeded})
	checkReplays(t, "d-2 not sent", getDeadLetter(t, s, "d-2").Replays, []store.Replay{{At: r, Outcome: store.ReplayNotSent, SettledAt: done, Error: "publish: broker down"}})

	// Settled already: neither a second settlement nor a new failure
	// changes it.
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"d-1"}, Outcome: store.ReplayNotSent, At: done.Add(time.Second)}); err != nil {
		t.Fatalf("settle d-1 again: got error %v, want nil", err)
	}
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{replayedCopy(deadLetterAt("d-1", "permanent_error", "e2", done.Add(time.Minute)))}})
	checkReplays(t, "d-1 settled, then failed", getDeadLetter(t, s, "d-1").Replays, []store.Replay{succeeded})

	if err := rp.BeginReplay(ctx, "no-such-id", r); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("begin replay of a missing dead letter: got error %v, want one wrapping store.ErrNotFound", err)
	}
}

// testDeadLetterHistoryDeleted: deleting a dead letter deletes its history;
// the same ID recorded later starts a new one.
func testDeadLetterHistoryDeleted(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := now().Add(-time.Hour)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{deadLetterAt("d-1", "unknown_type", "e", t0)}})
	if err := s.(store.DeadLetterReplayer).BeginReplay(ctx, "d-1", t0.Add(time.Minute)); err != nil {
		t.Fatalf("begin replay of d-1: got error %v, want nil", err)
	}
	if n, err := s.DeleteDeadLetters(ctx, []string{"d-1"}); err != nil || n != 1 {
		t.Fatalf("delete d-1: got %d, %v; want 1, nil", n, err)
	}
	later := deadLetterAt("d-1", "malformed_body", "e2", t0.Add(time.Hour))
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{later}})
	d := getDeadLetter(t, s, "d-1")
	checkDeadLetter(t, "recorded after delete", *d, later)
	if len(d.Replays) != 0 || d.FirstReason != "malformed_body" {
		t.Errorf("recorded after delete: %d replays, first reason %q; want none and malformed_body (a new history)", len(d.Replays), d.FirstReason)
	}
}

func testDeadLetterReplayHostile(t *testing.T, s store.Store) {
	ctx := t.Context()
	rp := s.(store.DeadLetterReplayer)
	t0 := now()
	for _, hostile := range []string{"k\x00", "k\xff", "<script>"} {
		if err := rp.BeginReplay(ctx, hostile, t0); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("begin replay of %q: got error %v, want one wrapping store.ErrNotFound", hostile, err)
		}
		if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{hostile}, Outcome: store.ReplayNotSent, At: t0, Error: hostile}); err != nil {
			t.Errorf("settle replay of %q: got error %v, want nil", hostile, err)
		}
	}
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{deadLetterAt("d-1", "unknown_type", "e", t0)}})
	if err := rp.BeginReplay(ctx, "d-1", t0); err != nil {
		t.Fatalf("begin replay of d-1: got error %v, want nil", err)
	}
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"d-1"}, Outcome: store.ReplayNotSent, At: t0, Error: "bad \x00 \xff <script>"}); err != nil {
		t.Fatalf("settle d-1 with a hostile error: got error %v, want nil", err)
	}
	if r := getDeadLetter(t, s, "d-1").LastReplay(); r == nil || r.Outcome != store.ReplayNotSent || r.Error == "" {
		t.Errorf("settled with a hostile error: got %+v, want not_sent with the error kept (made storable)", r)
	}
}

// testDeadLetterMark: a count's mark selects exactly the dead letters
// counted: not one recorded after it, nor one recorded again after it.
func testDeadLetterMark(t *testing.T, s store.Store) {
	ctx := t.Context()
	dq := s.(readmodel.DeadLetterQuerier)
	dls := seedDeadLetters(t, s)
	q := &readmodel.DeadLetterQuery{Reason: "malformed_body"}
	c, err := dq.CountDeadLetters(ctx, q)
	if err != nil || c.AsOf == "" {
		t.Fatalf("count dead letters: got %+v, %v; want a mark and nil", c, err)
	}
	counted := matching(dls, *q)
	if c.ByReason["malformed_body"] != len(counted) {
		t.Fatalf("count: got %v, want %d malformed_body", c.ByReason, len(counted))
	}
	// After the count: a new dead letter, and one counted fails again.
	at := now().Add(time.Minute)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{
		deadLetterAt("d-new", "malformed_body", "e", at), deadLetterAt(counted[0], "malformed_body", "again", at),
	}})
	bound := *q
	bound.AsOf = c.AsOf
	got, want := queryAll(t, s, bound), counted[1:]
	if !slices.Equal(got, want) {
		t.Errorf("query as of the count: got %v, want %v (neither d-new nor %s, recorded after the count)", got, want, counted[0])
	}
	if all := queryAll(t, s, *q); len(all) != len(counted)+1 {
		t.Errorf("query without a mark: got %v, want every malformed_body dead letter, d-new too", all)
	}
	c2, err := dq.CountDeadLetters(ctx, &bound)
	if err != nil || !maps.Equal(c2.ByReason, map[string]int{"malformed_body": len(want)}) || c2.AsOf != c.AsOf {
		t.Errorf("count as of the first count: got %+v, %v; want %d malformed_body and the same mark", c2, err, len(want))
	}
	n, err := dq.DeleteDeadLettersAsOf(ctx, append([]string{"d-new"}, counted...), c.AsOf)
	if err != nil || n != len(want) {
		t.Fatalf("delete as of the count: got %d, %v; want %d, nil", n, err, len(want))
	}
	if left := queryAll(t, s, *q); !slices.Equal(left, []string{counted[0], "d-new"}) {
		t.Errorf("after deleting as of the count: left %v, want [%s d-new]", left, counted[0])
	}
	if _, err := dq.QueryDeadLetters(ctx, &readmodel.DeadLetterQuery{AsOf: "not a mark"}); err == nil {
		t.Errorf("query as of %q: got no error, want one saying it is not a mark", "not a mark")
	}
}

// testDeadLetterOneReplayPending: a replay is refused while the latest one
// is pending (store.ErrReplayPending), so that the outcome recorded is
// that of the copy consumed; once it is settled, a new one is taken.
func testDeadLetterOneReplayPending(t *testing.T, s store.Store) {
	ctx := t.Context()
	rp := s.(store.DeadLetterReplayer)
	t0 := now().Add(-time.Hour)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{deadLetterAt("d-1", "unknown_type", "e", t0)}})
	r1 := t0.Add(time.Minute)
	if err := rp.BeginReplay(ctx, "d-1", r1); err != nil {
		t.Fatalf("begin replay of d-1: got error %v, want nil", err)
	}
	if err := rp.BeginReplay(ctx, "d-1", r1.Add(time.Second)); !errors.Is(err, store.ErrReplayPending) {
		t.Fatalf("begin a second replay while the first is pending: got error %v, want one wrapping store.ErrReplayPending", err)
	}
	checkReplays(t, "after a refused replay", getDeadLetter(t, s, "d-1").Replays, []store.Replay{{At: r1, Outcome: store.ReplayPending}})
	done := r1.Add(time.Minute)
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"d-1"}, Outcome: store.ReplayNotSent, At: done, Error: "down"}); err != nil {
		t.Fatalf("settle d-1: got error %v, want nil", err)
	}
	r2 := done.Add(time.Minute)
	if err := rp.BeginReplay(ctx, "d-1", r2); err != nil {
		t.Fatalf("begin replay of d-1 after the first was settled: got error %v, want nil", err)
	}
	if got := getDeadLetter(t, s, "d-1").Replays; len(got) != 2 || got[1].Outcome != store.ReplayPending {
		t.Errorf("after the second replay: got %+v, want a not_sent replay and a pending one", got)
	}
}

// testDeadLetterOriginalCopy: the dead letter recorded again from a copy
// without store.HeaderReplay (a late redelivery of the original message)
// leaves the pending replay pending; a replayed copy settles it.
func testDeadLetterOriginalCopy(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := now().Add(-time.Hour)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{deadLetterAt("d-1", "unknown_type", "e", t0)}})
	r := t0.Add(time.Minute)
	if err := s.(store.DeadLetterReplayer).BeginReplay(ctx, "d-1", r); err != nil {
		t.Fatalf("begin replay of d-1: got error %v, want nil", err)
	}
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{deadLetterAt("d-1", "unknown_type", "late copy", r.Add(time.Second))}})
	checkReplays(t, "recorded again from the original copy", getDeadLetter(t, s, "d-1").Replays, []store.Replay{{At: r, Outcome: store.ReplayPending}})
	again := replayedCopy(deadLetterAt("d-1", "permanent_error", "replayed", r.Add(time.Minute)))
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{again}})
	checkReplays(t, "recorded again from the replayed copy", getDeadLetter(t, s, "d-1").Replays,
		[]store.Replay{{At: r, Outcome: store.ReplayFailed, SettledAt: again.LastFailedAt, Reason: again.Reason, Error: again.Error}})

	// A replayed copy with hostile headers is recorded and settles too.
	r2 := r.Add(time.Hour)
	if err := s.(store.DeadLetterReplayer).BeginReplay(ctx, "d-1", r2); err != nil {
		t.Fatalf("begin second replay of d-1: got error %v, want nil", err)
	}
	hostile := replayedCopy(deadLetterAt("d-1", "permanent_error", "hostile", r2.Add(time.Second)))
	hostile.Envelope.Headers["bad\x00key\xff"] = "<script>\x00"
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{hostile}})
	if got := getDeadLetter(t, s, "d-1").LastReplay(); got == nil || got.Outcome != store.ReplayFailed || got.Error != "hostile" {
		t.Errorf("recorded again from a replayed copy with hostile headers: latest replay %+v, want failed with error hostile", got)
	}
}

// testDeadLetterQueryByState: DeadLetterQuery.State selects by the latest
// replay, in queries and counts, within a mark too.
func testDeadLetterQueryByState(t *testing.T, s store.Store) {
	dq, ok := s.(readmodel.DeadLetterQuerier)
	if !ok {
		t.Skip("not a readmodel.DeadLetterQuerier")
	}
	ctx := t.Context()
	rp := s.(store.DeadLetterReplayer)
	t0 := now().Add(-time.Hour)
	ids := []string{"new", "failed", "not-sent", "ok", "pending", "ok-then-pending"}
	var dls []store.DeadLetter
	for _, id := range ids {
		dls = append(dls, deadLetterAt(id, "permanent_error", "e", t0))
	}
	commit(t, s, &store.Changes{DeadLetters: dls})
	r, done := t0.Add(time.Minute), t0.Add(2*time.Minute)
	for _, id := range ids[1:] {
		if err := rp.BeginReplay(ctx, id, r); err != nil {
			t.Fatalf("begin replay of %s: got error %v, want nil", id, err)
		}
	}
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{replayedCopy(deadLetterAt("failed", "permanent_error", "again", done))}})
	settle := func(id string, o store.ReplayOutcome) {
		if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{id}, Outcome: o, At: done}); err != nil {
			t.Fatalf("settle %s: got error %v, want nil", id, err)
		}
	}
	settle("not-sent", store.ReplayNotSent)
	settle("ok", store.ReplaySucceeded)
	settle("ok-then-pending", store.ReplaySucceeded)
	if err := rp.BeginReplay(ctx, "ok-then-pending", done.Add(time.Minute)); err != nil {
		t.Fatalf("begin second replay of ok-then-pending: got error %v, want nil", err)
	}
	c, err := dq.CountDeadLetters(ctx, nil)
	if err != nil {
		t.Fatalf("count dead letters: got error %v, want nil", err)
	}
	for _, tc := range []struct {
		state store.DeadLetterState
		want  []string
	}{
		{"", []string{"failed", "new", "not-sent", "ok", "ok-then-pending", "pending"}},
		{store.DeadLettersAll, []string{"failed", "new", "not-sent", "ok", "ok-then-pending", "pending"}},
		{store.DeadLettersUnresolved, []string{"failed", "new", "not-sent"}},
		{store.DeadLettersResolved, []string{"ok"}},
		{store.DeadLettersPending, []string{"ok-then-pending", "pending"}},
	} {
		q := readmodel.DeadLetterQuery{State: tc.state, Reason: "permanent_error"}
		if got := queryAll(t, s, q); !slices.Equal(got, tc.want) {
			t.Errorf("query state %q: got %v, want %v", tc.state, got, tc.want)
		}
		q.AsOf = c.AsOf
		if got := queryAll(t, s, q); !slices.Equal(got, tc.want) {
			t.Errorf("query state %q as of a count: got %v, want %v", tc.state, got, tc.want)
		}
		n, err := dq.CountDeadLetters(ctx, &q)
		if err != nil || n.ByReason["permanent_error"] != len(tc.want) {
			t.Errorf("count state %q: got %+v, %v; want %d permanent_error", tc.state, n, err, len(tc.want))
		}
	}
}

// testDeadLetterReplaySettledInCommit: Changes.SettleReplays settles
// replays in the unit of work's commit, and only a pending latest one.
func testDeadLetterReplaySettledInCommit(t *testing.T, s store.Store) {
	ctx := t.Context()
	t0 := now().Add(-time.Hour)
	commit(t, s, &store.Changes{DeadLetters: []store.DeadLetter{deadLetterAt("d-1", "unknown_type", "e", t0), deadLetterAt("d-2", "unknown_type", "e", t0)}})
	r := t0.Add(time.Minute)
	if err := s.(store.DeadLetterReplayer).BeginReplay(ctx, "d-1", r); err != nil {
		t.Fatalf("begin replay of d-1: got error %v, want nil", err)
	}
	done := r.Add(time.Second)
	ch := &store.Changes{SettleReplays: &store.SettleReplaysParams{IDs: []string{"d-1", "d-2", "no-such-id", "k\x00"}, Outcome: store.ReplaySucceeded, At: done}}
	if ch.Empty() {
		t.Fatalf("changes that settle replays: Empty() = true, want false (the engine would skip the commit)")
	}
	commit(t, s, ch)
	checkReplays(t, "d-1 settled in a commit", getDeadLetter(t, s, "d-1").Replays, []store.Replay{{At: r, Outcome: store.ReplaySucceeded, SettledAt: done}})
	checkReplays(t, "d-2, never replayed", getDeadLetter(t, s, "d-2").Replays, nil)
}

package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
)

// scheduleCases check store.Scheduler and store.ScheduleUnitOfWork. They
// run for every store that implements store.Scheduler (found by type
// assertion, so an implemented capability is never left untested) and skip
// for the others.
var scheduleCases = []testCase{
	{"SchedulesSaveIsIdempotent", schedulesOnly(testSchedulesSaveIsIdempotent)},
	{"SchedulesDueAndAdvance", schedulesOnly(testSchedulesDueAndAdvance)},
	{"SchedulesAdvanceOnceAcrossUnitsOfWork", schedulesOnly(testSchedulesAdvanceOnce)},
	{"SchedulesPauseResumeDelete", schedulesOnly(testSchedulesPauseResumeDelete)},
	{"SchedulesList", schedulesOnly(testSchedulesList)},
	{"SchedulesHostileNames", schedulesOnly(testSchedulesHostileNames)},
}

func schedulesOnly(fn func(t *testing.T, s store.Store, sc store.Scheduler)) func(t *testing.T, s store.Store) {
	return func(t *testing.T, s store.Store) {
		sc, ok := s.(store.Scheduler)
		if !ok {
			t.Skipf("%T does not implement store.Scheduler", s)
		}
		fn(t, s, sc)
	}
}

func newSchedule(name, spec string, due time.Time) *store.Schedule {
	env := envelope("", due)
	env.ID, env.SentAt = "", time.Time{}
	return &store.Schedule{Name: name, Spec: spec, Missed: store.MissedFireOnce, Grace: time.Minute, Envelope: env, NextDue: due, UpdatedAt: due}
}

func getSchedule(t *testing.T, sc store.Scheduler, name string) *store.Schedule {
	t.Helper()
	got, err := sc.GetSchedule(t.Context(), name)
	if err != nil {
		t.Fatalf("get schedule %q: got error %v, want nil", name, err)
	}
	return got
}

func saveSchedule(t *testing.T, sc store.Scheduler, s *store.Schedule) {
	t.Helper()
	if err := sc.SaveSchedule(t.Context(), s); err != nil {
		t.Fatalf("save schedule %q: got error %v, want nil", s.Name, err)
	}
}

// beginSchedules starts a unit of work that must be a ScheduleUnitOfWork.
func beginSchedules(t *testing.T, s store.Store) store.ScheduleUnitOfWork {
	t.Helper()
	uow := begin(t, s)
	su, ok := uow.(store.ScheduleUnitOfWork)
	if !ok {
		_ = uow.Rollback(t.Context())
		t.Fatalf("%T implements store.Scheduler but its unit of work %T is not a store.ScheduleUnitOfWork", s, uow)
	}
	t.Cleanup(func() { _ = su.Rollback(t.Context()) })
	return su
}

func testSchedulesSaveIsIdempotent(t *testing.T, s store.Store, sc store.Scheduler) {
	t0 := now()
	saveSchedule(t, sc, newSchedule("report", "@every 1m0s", t0.Add(time.Minute)))
	got := getSchedule(t, sc, "report")
	if got.Paused || !got.NextDue.Equal(t0.Add(time.Minute)) || got.Spec != "@every 1m0s" || got.Missed != store.MissedFireOnce {
		t.Fatalf("new schedule: got %+v, want not paused, due in 1m", got)
	}
	if string(got.Envelope.Body) != `{"id":""}` || got.Envelope.Type != "test.Ping" || got.Envelope.Headers[`traceparent`] == "" {
		t.Errorf("envelope template: got %+v, want the saved one", got.Envelope)
	}
	// A second replica registers the same spec later: the due time stays.
	again := newSchedule("report", "@every 1m0s", t0.Add(2*time.Minute))
	again.Missed, again.Grace = store.MissedSkip, 90*time.Second
	again.Envelope.Body = []byte(`{"v":2}`)
	saveSchedule(t, sc, again)
	got = getSchedule(t, sc, "report")
	if !got.NextDue.Equal(t0.Add(time.Minute)) {
		t.Errorf("same spec saved again: NextDue %s, want it kept at %s", got.NextDue, t0.Add(time.Minute))
	}
	if got.Missed != store.MissedSkip || got.Grace != 90*time.Second || string(got.Envelope.Body) != `{"v":2}` {
		t.Errorf("same spec saved again: got missed %q grace %s body %s, want the new definition", got.Missed, got.Grace, got.Envelope.Body)
	}
	// Paused survives a restart's registration; a changed spec moves NextDue.
	if err := sc.PauseSchedule(t.Context(), "report", true, t0); err != nil {
		t.Fatal(err)
	}
	saveSchedule(t, sc, newSchedule("report", "*/5 * * * *", t0.Add(5*time.Minute)))
	got = getSchedule(t, sc, "report")
	if !got.Paused {
		t.Error("registration after a pause: schedule resumed, want it still paused")
	}
	if !got.NextDue.Equal(t0.Add(5*time.Minute)) || got.Spec != "*/5 * * * *" {
		t.Errorf("changed spec: got spec %q due %s, want the new spec due %s", got.Spec, got.NextDue, t0.Add(5*time.Minute))
	}
}

func testSchedulesDueAndAdvance(t *testing.T, s store.Store, sc store.Scheduler) {
	t0 := now()
	saveSchedule(t, sc, newSchedule("due", "@every 1s", t0.Add(-time.Second)))
	saveSchedule(t, sc, newSchedule("later", "@every 1s", t0.Add(time.Hour)))
	saveSchedule(t, sc, newSchedule("paused", "@every 1s", t0.Add(-2*time.Second)))
	if err := sc.PauseSchedule(t.Context(), "paused", true, t0); err != nil {
		t.Fatal(err)
	}
	su := beginSchedules(t, s)
	due, err := su.DueSchedules(t.Context(), t0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 1 || due[0].Name != "due" || !due[0].NextDue.Equal(t0.Add(-time.Second)) {
		t.Fatalf("due schedules: got %+v, want only \"due\"", due)
	}
	if err := su.AdvanceSchedules(t.Context(), []store.ScheduleAdvance{{Name: "due", From: due[0].NextDue, To: t0.Add(time.Second), Fired: due[0].NextDue}}); err != nil {
		t.Fatal(err)
	}
	msg := envelope("tick-1", t0)
	if err := su.Commit(t.Context(), &store.Changes{Outbox: []store.OutboxMessage{{Envelope: msg, CreatedAt: t0}}}); err != nil {
		t.Fatalf("commit advance: got error %v, want nil", err)
	}
	got := getSchedule(t, sc, "due")
	if !got.NextDue.Equal(t0.Add(time.Second)) || !got.LastTick.Equal(t0.Add(-time.Second)) {
		t.Errorf("after advance: got next %s last %s, want next %s last %s", got.NextDue, got.LastTick, t0.Add(time.Second), t0.Add(-time.Second))
	}
	if ms := claimOutbox(t, s, store.ClaimParams{Now: t0, Limit: 10, Lease: time.Minute, CreatedBefore: t0.Add(time.Second)}); len(ms) != 1 || ms[0].Envelope.ID != "tick-1" {
		t.Errorf("outbox after advance: got %d messages, want the tick's one", len(ms))
	}
	// A skipped tick (Fired zero) moves NextDue and keeps LastTick.
	su = beginSchedules(t, s)
	if err := su.AdvanceSchedules(t.Context(), []store.ScheduleAdvance{{Name: "due", From: t0.Add(time.Second), To: t0.Add(3 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	if err := su.Commit(t.Context(), &store.Changes{}); err != nil {
		t.Fatalf("commit skip: got error %v, want nil", err)
	}
	got = getSchedule(t, sc, "due")
	if !got.NextDue.Equal(t0.Add(3*time.Second)) || !got.LastTick.Equal(t0.Add(-time.Second)) {
		t.Errorf("after skip: got next %s last %s, want next %s, last kept", got.NextDue, got.LastTick, t0.Add(3*time.Second))
	}
}

// Two units of work read the same due tick: one advance commits, the other
// fails with ErrConflict and writes nothing of its unit of work.
func testSchedulesAdvanceOnce(t *testing.T, s store.Store, sc store.Scheduler) {
	t0 := now()
	saveSchedule(t, sc, newSchedule("tick", "@every 1s", t0))
	first := beginSchedules(t, s)
	due, err := first.DueSchedules(t.Context(), t0, 10)
	if err != nil || len(due) != 1 {
		t.Fatalf("first: got %d due (%v), want 1", len(due), err)
	}
	second := beginSchedules(t, s)
	// A store that locks skips the row; one that does not returns it.
	if due2, err := second.DueSchedules(t.Context(), t0, 10); err != nil || len(due2) > 1 {
		t.Fatalf("second: got %d due (%v), want 0 or 1 and no wait", len(due2), err)
	}
	adv := []store.ScheduleAdvance{{Name: "tick", From: t0, To: t0.Add(time.Second), Fired: t0}}
	for _, su := range []store.ScheduleUnitOfWork{first, second} {
		if err := su.AdvanceSchedules(t.Context(), adv); err != nil {
			t.Fatal(err)
		}
	}
	out := func(id string) *store.Changes {
		return &store.Changes{Outbox: []store.OutboxMessage{{Envelope: envelope(id, t0), CreatedAt: t0}}}
	}
	if err := first.Commit(t.Context(), out("from-first")); err != nil {
		t.Fatalf("first commit: got error %v, want nil", err)
	}
	if err := second.Commit(t.Context(), out("from-second")); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("second commit of the same tick: got error %v, want store.ErrConflict", err)
	}
	ms := claimOutbox(t, s, store.ClaimParams{Now: t0, Limit: 10, Lease: time.Minute, CreatedBefore: t0.Add(time.Second)})
	if len(ms) != 1 || ms[0].Envelope.ID != "from-first" {
		t.Errorf("outbox: got %d messages, want only the first commit's (the conflicting commit wrote nothing)", len(ms))
	}
	// An advance of a deleted schedule conflicts too.
	if err := sc.DeleteSchedule(t.Context(), "tick"); err != nil {
		t.Fatal(err)
	}
	third := beginSchedules(t, s)
	if err := third.AdvanceSchedules(t.Context(), []store.ScheduleAdvance{{Name: "tick", From: t0.Add(time.Second), To: t0.Add(2 * time.Second)}}); err != nil {
		t.Fatal(err)
	}
	if err := third.Commit(t.Context(), &store.Changes{}); !errors.Is(err, store.ErrConflict) {
		t.Errorf("advance of a deleted schedule: got error %v, want store.ErrConflict", err)
	}
}

func testSchedulesPauseResumeDelete(t *testing.T, s store.Store, sc store.Scheduler) {
	t0 := now()
	saveSchedule(t, sc, newSchedule("p", "@every 1s", t0))
	if err := sc.PauseSchedule(t.Context(), "p", true, t0); err != nil {
		t.Fatal(err)
	}
	su := beginSchedules(t, s)
	if due, err := su.DueSchedules(t.Context(), t0.Add(time.Hour), 10); err != nil || len(due) != 0 {
		t.Errorf("paused: got %d due (%v), want none", len(due), err)
	}
	_ = su.Rollback(t.Context())
	if err := sc.PauseSchedule(t.Context(), "p", false, t0); err != nil {
		t.Fatal(err)
	}
	su = beginSchedules(t, s)
	if due, err := su.DueSchedules(t.Context(), t0.Add(time.Hour), 10); err != nil || len(due) != 1 || !due[0].NextDue.Equal(t0) {
		t.Errorf("resumed: got %+v (%v), want the schedule with its NextDue kept", due, err)
	}
	_ = su.Rollback(t.Context()) // a store that locks due rows holds them until then
	if err := sc.DeleteSchedule(t.Context(), "p"); err != nil {
		t.Fatal(err)
	}
	for op, err := range map[string]error{
		"get":    func() error { _, err := sc.GetSchedule(t.Context(), "p"); return err }(),
		"pause":  sc.PauseSchedule(t.Context(), "p", true, t0),
		"delete": sc.DeleteSchedule(t.Context(), "p"),
	} {
		if !errors.Is(err, store.ErrNotFound) {
			t.Errorf("%s of a missing schedule: got error %v, want store.ErrNotFound", op, err)
		}
	}
}

func testSchedulesList(t *testing.T, s store.Store, sc store.Scheduler) {
	t0 := now()
	for _, n := range []string{"c", "a", "b"} {
		saveSchedule(t, sc, newSchedule(n, "@every 1s", t0))
	}
	var names []string
	for after := ""; ; {
		page, err := sc.ListSchedules(t.Context(), &store.ListParams{After: after, Limit: 2})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range page {
			names = append(names, p.Name)
		}
		if len(page) < 2 {
			break
		}
		after = page[len(page)-1].Name
	}
	if len(names) != 3 || names[0] != "a" || names[1] != "b" || names[2] != "c" {
		t.Errorf("list: got %v, want [a b c] in pages of 2", names)
	}
}

// Names and bodies with markup, NUL or invalid UTF-8 are kept as they are
// or refused with store.ErrRejected, never mangled.
func testSchedulesHostileNames(t *testing.T, _ store.Store, sc store.Scheduler) {
	t0 := now()
	for _, name := range []string{"<script>alert(1)</script>", "nul\x00name", "bad\xffutf8"} {
		err := sc.SaveSchedule(t.Context(), newSchedule(name, "@every 1s", t0))
		if err != nil {
			if !errors.Is(err, store.ErrRejected) {
				t.Errorf("save %q: got error %v, want nil or store.ErrRejected", name, err)
			}
			continue
		}
		if got := getSchedule(t, sc, name); got.Name != name {
			t.Errorf("save %q: read back %q", name, got.Name)
		}
	}
}

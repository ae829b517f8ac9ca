package enginetest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// Migrator is what EagerMigration needs of a store: a queue that moves
// sagas between states.
type Migrator interface {
	store.Queue
	store.StateMigrator
}

type (
	eagerStart struct{ ID string }
	eagerNudge struct{ ID string }
)

// eagerMachine is the saga type "eager": Start enters Old. The migrated
// build has no Old: it declares MigrateState("Old", Open), and Nudge moves
// a saga from Open to Done.
func eagerMachine(migrated bool) *saga.Machine[struct{}] {
	m := saga.New[struct{}]("eager")
	s := saga.NewEvent[eagerStart](m, func(e eagerStart) string { return e.ID })
	n := saga.NewEvent[eagerNudge](m, func(e eagerNudge) string { return e.ID })
	if !migrated {
		old := m.State("Old")
		m.Initially(saga.When(s).TransitionTo(old))
		m.During(old, saga.Ignore(s), saga.Ignore(n))
		return m
	}
	open, done := m.State("Open"), m.Final("Done")
	m.MigrateState("Old", open)
	m.Initially(saga.When(s).TransitionTo(open))
	m.During(open, saga.Ignore(s), saga.When(n).TransitionTo(done))
	return m
}

// startEngine runs m on st until the test ends.
func startEngine(t *testing.T, st Migrator, m *saga.Machine[struct{}]) *idem.Engine {
	t.Helper()
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(m); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	return e
}

func stopEngine(t *testing.T, e *idem.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// The eager pass (MigrateStates in small batches) races the new build's
// engine, which migrates the same sagas on load as their messages arrive:
// each saga is migrated exactly once, by one or the other, and its
// message applies after the migration. The pass starts once the engine
// migrated a saga of the first half, which alone has messages, and the
// second half's messages are published after its first batch, so both
// paths migrate some; how many each takes varies.
//
// EagerMigration runs it on st, a new store.
func EagerMigration(t *testing.T, st Migrator) {
	const n = 200
	publish := func(e *idem.Engine, msg func(k string) any, prefix string, from, to int) {
		var envs []idem.Envelope
		for i := from; i < to; i++ {
			env, err := e.NewEnvelope(fmt.Sprintf("%s-%d", prefix, i), msg(fmt.Sprintf("k-%02d", i)))
			if err != nil {
				t.Fatal(err)
			}
			envs = append(envs, env)
		}
		if err := st.Publish(t.Context(), envs); err != nil {
			t.Fatal(err)
		}
	}
	count := func(state string) func() (bool, error) {
		return func() (bool, error) { c, err := st.CountState(t.Context(), "eager", state); return c == n, err }
	}
	e := startEngine(t, st, eagerMachine(false))
	publish(e, func(k string) any { return eagerStart{ID: k} }, "start", 0, n)
	WaitFor(t, 30*time.Second, "every saga in Old", count("Old"))
	stopEngine(t, e)

	e = startEngine(t, st, eagerMachine(true))
	nudge := func(from, to int) { publish(e, func(k string) any { return eagerNudge{ID: k} }, "nudge", from, to) }
	nudge(0, n/2)
	WaitFor(t, 30*time.Second, "a saga migrated on load", func() (bool, error) {
		c, err := st.CountState(t.Context(), "eager", "Done")
		return c > 0, err
	})
	eager := 0
	p := &store.MigrateStatesParams{SagaType: "eager", From: "Old", To: "Open", Limit: 3, EventType: saga.MigrationEvent, Actor: "test"}
	for batch := 0; ; batch++ {
		if batch == 1 { // the second half's messages race the rest of the pass
			nudge(n/2, n)
		}
		p.At = time.Now().UTC()
		moved, err := st.MigrateStates(t.Context(), p)
		if err != nil {
			t.Fatal(err)
		}
		if moved == 0 {
			break
		}
		eager += moved
	}
	WaitFor(t, 30*time.Second, "every saga in Done", count("Done"))
	stopEngine(t, e)
	t.Logf("the eager pass moved %d of %d sagas; the engine migrated the others on load", eager, n)
	if eager == 0 || eager == n {
		t.Errorf("the eager pass moved %d of %d sagas: want both paths to have migrated some", eager, n)
	}
	for i := range n {
		checkOneMigration(t, st, fmt.Sprintf("k-%02d", i))
	}
}

// checkOneMigration asserts that the journal of eager/k is start, one
// migration Old>Open, then the nudge Open>Done, at rising versions.
func checkOneMigration(t *testing.T, st Migrator, k string) {
	t.Helper()
	js, err := st.Journal(t.Context(), store.Key{SagaType: "eager", Key: k})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range js {
		got = append(got, fmt.Sprintf("%s %s>%s", j.EventType, j.FromState, j.ToState))
	}
	want := []string{
		saga.MessageType(eagerStart{}) + " " + string(saga.Initial) + ">Old",
		saga.MigrationEvent + " Old>Open",
		saga.MessageType(eagerNudge{}) + " Open>Done",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("journal of eager/%s:\n got %q\nwant %q", k, got, want)
	}
	for i := 1; i < len(js); i++ {
		if js[i].Version < js[i-1].Version {
			t.Errorf("journal of eager/%s: version %d after %d", k, js[i].Version, js[i-1].Version)
		}
	}
}

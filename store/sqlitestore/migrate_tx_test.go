package sqlitestore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

type (
	migStart struct{ ID string }
	migNudge struct{ ID string }
)

func migMachine(migrated bool) *saga.Machine[struct{}] {
	m := saga.New[struct{}]("migtx")
	s := saga.NewEvent[migStart](m, func(e migStart) string { return e.ID })
	n := saga.NewEvent[migNudge](m, func(e migNudge) string { return e.ID })
	if !migrated {
		old := m.State("Old")
		m.Initially(saga.When(s).TransitionTo(old))
		m.During(old, saga.Ignore(s), saga.Ignore(n))
		return m
	}
	open := m.State("Open")
	m.MigrateState("Old", open)
	m.Initially(saga.When(s).TransitionTo(open))
	// The step writes a row, then the activity ignores the message: its
	// SQL is to be undone (saga.Context.Tx, Activity.Ignore).
	m.During(open, saga.Ignore(s), saga.When(n).Then(func(c *saga.Context[struct{}], _ migNudge) error {
		tx, ok := sqlitestore.TxFrom(c)
		if !ok {
			panic("no tx")
		}
		_, err := tx.ExecContext(c.Context(), `INSERT INTO orders (id) VALUES ('leaked')`)
		return err
	}).Ignore())
	return m
}

// A declared migration is written even when the saga's new state ignores
// the message (an applied step that changes nothing else); the SQL the
// activity ran before it ignored the message is undone all the same.
func TestMigrationUndoesTheSQLOfAnIgnoredEvent(t *testing.T) {
	st := openStore(t, sqlitestore.Config{PollInterval: 10 * time.Millisecond})
	db := appDB(t, st)
	run := func(m *saga.Machine[struct{}], id string, msg any, done func() (bool, error)) {
		e, err := idem.NewEngine(st, st, &idem.Config{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Register(m); err != nil {
			t.Fatal(err)
		}
		if err := e.Start(t.Context()); err != nil {
			t.Fatal(err)
		}
		env, err := e.NewEnvelope(id, msg)
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Publish(t.Context(), []idem.Envelope{env}); err != nil {
			t.Fatal(err)
		}
		enginetest.WaitFor(t, 30*time.Second, id, done)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = e.Stop(ctx)
	}
	journal := func() ([]store.JournalEntry, error) {
		return st.Journal(t.Context(), store.Key{SagaType: "migtx", Key: "k"})
	}
	run(migMachine(false), "start-1", migStart{ID: "k"}, func() (bool, error) { j, err := journal(); return len(j) == 1, err })
	run(migMachine(true), "nudge-1", migNudge{ID: "k"}, func() (bool, error) {
		j, err := journal()
		return slices.ContainsFunc(j, func(e store.JournalEntry) bool { return e.EventType == saga.MigrationEvent }), err
	})
	var n int
	if err := db.QueryRow(`SELECT count(*) FROM orders WHERE id = 'leaked'`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d row(s) written by an activity that ignored its message were committed", n)
	}
}

package saga_test

import (
	"testing"

	"github.com/idemhq/idem/saga"
)

type (
	renamedA struct{ ID string }
	renamedB struct{ ID string }
)

// Binding an event after RenameMessage named its type as an old one would
// leave the event unreachable (the rename wins), and declaring a state a
// migration moves sagas out of would move them on every load: both panic.
func TestMigrationDeclarationsConflict(t *testing.T) {
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", what)
			}
		}()
		f()
	}
	m := saga.New[struct{}]("r")
	a := m.State("A")
	_ = saga.NewEvent[renamedB](m, func(e renamedB) string { return e.ID })
	m.RenameMessage(saga.MessageType(renamedA{}), saga.MessageType(renamedB{}))
	mustPanic("an event bound after its type was renamed", func() {
		saga.NewEvent[renamedA](m, func(e renamedA) string { return e.ID })
	})
	m.MigrateState("Gone", a)
	mustPanic("a migrated state declared", func() { m.State("Gone") })
	mustPanic("a migrated final state declared", func() { m.Final("Gone") })
}

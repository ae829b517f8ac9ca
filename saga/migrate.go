package saga

import (
	"fmt"
	"slices"
)

// MigrateState declares that a saga stored in state from, which the
// machine no longer declares, is in state to: a removed state mapped to a
// kept one, or a renamed state. The migration applies on load, inside the
// unit of work of the next event the saga receives, so it is exactly-once
// with that event; the engine records it in the saga's journal (event
// MigrationEvent, from the old state to the new). The deploy check counts
// the sagas of from as served (docs/deploys.md, "Migrating"). Keep the
// declaration until no saga is stored in from.
//
// It panics when from is empty or still declared, when to is not a
// declared state, or when from already has a migration.
func (m *Machine[S]) MigrateState(from string, to State) {
	f := State(from)
	switch {
	case from == "" || m.declares(f):
		panic(fmt.Sprintf("saga %s: MigrateState(%q): the state is declared (or empty): migrate only a state the machine no longer has", m.name, from))
	case !slices.Contains(m.states, to):
		panic(fmt.Sprintf("saga %s: MigrateState(%q, %q): the target state is not declared", m.name, from, to))
	case m.stateMoves[f] != "":
		panic(fmt.Sprintf("saga %s: MigrateState(%q): declared twice", m.name, from))
	}
	if m.stateMoves == nil {
		m.stateMoves = map[State]State{}
	}
	m.stateMoves[f] = to
}

// RenameMessage declares that messages of type old are event E now,
// whose message type is newType: bodies of type old (queued, in the
// outbox, fired by pending timers) decode into E and apply as E. The
// machine consumes both names. Keep the declaration until no message of
// type old is left.
//
// It panics when old is empty or an event of the machine, when newType is
// not one, or when old is renamed twice.
func (m *Machine[S]) RenameMessage(old, newType string) {
	_, isEvent := m.events[old]
	_, target := m.events[newType]
	switch {
	case old == "" || isEvent:
		panic(fmt.Sprintf("saga %s: RenameMessage(%q): the type is an event of the machine (or empty)", m.name, old))
	case !target:
		panic(fmt.Sprintf("saga %s: RenameMessage(%q, %q): the new type is not an event of the machine", m.name, old, newType))
	case m.renamed[old] != "":
		panic(fmt.Sprintf("saga %s: RenameMessage(%q): declared twice", m.name, old))
	}
	if m.renamed == nil {
		m.renamed = map[string]string{}
	}
	m.renamed[old] = newType
	m.renameOrder = append(m.renameOrder, old)
}

// MigrationEvent is the event type of the journal entry that records a
// declared state migration (MigrateState).
const MigrationEvent = "idem.StateMigrated"

// eventType is the event a message of type t applies as: its new type
// when t was renamed.
func (m *Machine[S]) eventType(t string) string {
	if n, ok := m.renamed[t]; ok {
		return n
	}
	return t
}

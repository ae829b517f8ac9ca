package saga

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"
)

// Description is the complete, canonical self-description of a machine:
// everything the machine declares statically, as plain data. The console
// draws it, `idem graph --format json` prints it, and its Fingerprint
// identifies the definition, so that two builds can be compared without
// running them. It holds no maps, so its JSON encoding is stable.
//
// Machine.Describe lists states, events (with their states) and
// attributes in declaration order and transitions in Graph's order, which
// is how people read a machine; upgrades, ignored events, requests and
// faults are sorted. Declaration order changes nothing a machine does, so
// the fingerprint ignores it (see Canonical).
//
// Timers that handlers schedule with Context.Schedule are named at run
// time: the machine does not know their names, only their messages, which
// are ordinary events in Events. The timers a machine knows statically are
// its requests' timeouts (RequestDescription.Timer).
//
// The zero Description describes nothing. A Description is a value: it is
// safe for concurrent reads.
type Description struct {
	// Name is the saga type.
	Name string `json:"name"`
	// DataType is the Go type of the state document S.
	DataType string `json:"data_type"`
	// SchemaVersion is the state document's current schema version, and
	// Upgrades the from-versions of the upgrade steps present, ascending.
	SchemaVersion int   `json:"schema_version"`
	Upgrades      []int `json:"upgrades"`
	// States are the declared states, without Initial.
	States []StateDescription `json:"states"`
	// Events are the events the machine consumes, one per message type.
	Events []EventDescription `json:"events"`
	// Transitions are the edges of the machine: a handler without a
	// transition is a self-loop, and an ignored event is no transition.
	// A handler whose TransitionTo sits in a branch (If, IfElse) may also
	// leave the saga where it is; no transition shows that.
	Transitions []Transition `json:"transitions"`
	// Unhandled is the UnhandledPolicy ("error" or "ignore") and NotFound
	// the NotFoundPolicy ("ignore" or "dead_letter").
	Unhandled string `json:"unhandled"`
	NotFound  string `json:"not_found"`
	// Requests are the requests the machine declares, sorted by name.
	Requests []RequestDescription `json:"requests"`
	// Faults are the emitted message types whose faults the machine
	// receives (NewFault, and each request's command), sorted by message
	// type.
	Faults []FaultDescription `json:"faults"`
	// Attributes are the names of the searchable attributes.
	Attributes []string `json:"attributes"`
	// Migrations are the declared migrations (MigrateState,
	// RenameMessage), sorted by kind, then from. Omitted when there are
	// none, so a machine without migrations keeps its fingerprint.
	Migrations []MigrationDescription `json:"migrations,omitempty"`
}

// MigrationDescription is one declared migration: Kind "state" (a stored
// state From is now state To) or "message" (message type From is now
// event type To).
type MigrationDescription struct {
	Kind string `json:"kind"`
	From string `json:"from"`
	To   string `json:"to"`
}

// The kinds of MigrationDescription.
const (
	MigrateStateKind   = "state"
	MigrateMessageKind = "message"
)

// StateDescription is one declared state.
type StateDescription struct {
	Name  State `json:"name"`
	Final bool  `json:"final"`
	// Ignores are the events the state ignores explicitly (Ignore), sorted.
	// An event a state neither handles nor ignores follows the machine's
	// Unhandled policy, or is ignored when the state is final.
	Ignores []string `json:"ignores"`
}

// EventDescription is one event: a message type the machine decodes.
type EventDescription struct {
	// Type is the message type name (the envelope's type).
	Type string `json:"type"`
	// GoType is the Go type the body is decoded into, package path
	// included.
	GoType string `json:"go_type"`
	// HandledIn and IgnoredIn are the states whose behaviour for the event
	// is When or Ignore; Initial among them means the event may start a
	// saga (or is ignored when none exists).
	HandledIn []State `json:"handled_in"`
	IgnoredIn []State `json:"ignored_in"`
}

// Transition is one edge: Event moves a saga from From to To.
type Transition struct {
	From  State  `json:"from"`
	Event string `json:"event"`
	To    State  `json:"to"`
}

// RequestDescription is one request declared with NewRequest: the message
// types of its command, response, timeout and fault events, and its
// timeout timer's name.
type RequestDescription struct {
	Name     string `json:"name"`
	Timer    string `json:"timer"`
	Command  string `json:"command"`
	Response string `json:"response"`
	Timeout  string `json:"timeout"`
	Fault    string `json:"fault"`
}

// FaultDescription says that the machine receives Event when a message of
// type MessageType that it emitted is dead-lettered.
type FaultDescription struct {
	MessageType string `json:"message_type"`
	Event       string `json:"event"`
}

// Describe returns the machine's description. It is safe for concurrent
// use once the machine is built.
func (m *Machine[S]) Describe() Description {
	d := Description{
		Name:          m.name,
		DataType:      goTypeName(reflect.TypeFor[S]()),
		SchemaVersion: m.version,
		Upgrades:      []int{},
		States:        make([]StateDescription, 0, len(m.states)),
		Events:        make([]EventDescription, 0, len(m.eventOrder)),
		Transitions:   []Transition{},
		Unhandled:     m.unhandled.String(),
		NotFound:      m.notFound.String(),
		Requests:      slices.Clone(m.requestList),
		Faults:        []FaultDescription{},
		Attributes:    m.Attributes(),
	}
	for from := range m.upgrades {
		d.Upgrades = append(d.Upgrades, from)
	}
	for _, s := range m.states {
		d.States = append(d.States, StateDescription{Name: s, Final: m.final[s], Ignores: m.ignoredIn(s)})
	}
	for _, ev := range m.eventOrder {
		d.Events = append(d.Events, m.describeEvent(ev))
	}
	for _, e := range m.edges() {
		d.Transitions = append(d.Transitions, Transition{From: e.from, Event: e.event, To: e.to})
	}
	for msgType, ev := range m.faults {
		d.Faults = append(d.Faults, FaultDescription{MessageType: msgType, Event: ev})
	}
	if d.Requests == nil {
		d.Requests = []RequestDescription{}
	}
	for from, to := range m.stateMoves {
		d.Migrations = append(d.Migrations, MigrationDescription{Kind: MigrateStateKind, From: string(from), To: string(to)})
	}
	for from, to := range m.renamed {
		d.Migrations = append(d.Migrations, MigrationDescription{Kind: MigrateMessageKind, From: from, To: to})
	}
	d.sortUnordered()
	return d
}

// ignoredIn lists the events state s ignores explicitly, sorted.
func (m *Machine[S]) ignoredIn(s State) []string {
	out := []string{}
	for ev, h := range m.behaviors[s] {
		if h.ignore {
			out = append(out, ev)
		}
	}
	slices.Sort(out)
	return out
}

func (m *Machine[S]) describeEvent(ev string) EventDescription {
	e := EventDescription{Type: ev, GoType: m.events[ev].goType, HandledIn: []State{}, IgnoredIn: []State{}}
	for _, s := range append([]State{Initial}, m.states...) {
		switch h := m.behaviors[s][ev]; {
		case h == nil:
		case h.ignore:
			e.IgnoredIn = append(e.IgnoredIn, s)
		default:
			e.HandledIn = append(e.HandledIn, s)
		}
	}
	return e
}

// sortUnordered sorts the lists whose order Describe does not take from
// the declarations.
func (d *Description) sortUnordered() {
	slices.Sort(d.Upgrades)
	slices.SortFunc(d.Requests, func(a, b RequestDescription) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(d.Faults, func(a, b FaultDescription) int { return strings.Compare(a.MessageType, b.MessageType) })
	slices.SortFunc(d.Migrations, func(a, b MigrationDescription) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.From, b.From))
	})
}

// Canonical returns a copy of d in canonical form, the form Fingerprint
// hashes: every list sorted (states, events and their state lists by
// name, transitions by from, event and to, attributes by name), every nil
// list empty, and each invalid UTF-8 byte in a string replaced by U+FFFD,
// as encoding/json writes it. Declaration order is not part of a
// definition: no behaviour of a machine depends on the order of its
// states, events, behaviours, attributes, requests or upgrades, so
// reordering any of them keeps the fingerprint. A Description decoded
// from its JSON encoding has the same canonical form as the original.
func (d Description) Canonical() Description {
	c := d
	c.Upgrades = clone(d.Upgrades)
	c.States = clone(d.States)
	for i := range c.States {
		c.States[i].Ignores = clone(c.States[i].Ignores)
	}
	c.Events = clone(d.Events)
	for i := range c.Events {
		c.Events[i].HandledIn = clone(c.Events[i].HandledIn)
		c.Events[i].IgnoredIn = clone(c.Events[i].IgnoredIn)
	}
	c.Transitions = clone(d.Transitions)
	c.Requests = clone(d.Requests)
	c.Faults = clone(d.Faults)
	c.Attributes = clone(d.Attributes)
	if len(d.Migrations) > 0 {
		c.Migrations = clone(d.Migrations)
	}
	validStrings(reflect.ValueOf(&c).Elem())
	c.sortAll()
	return c
}

// sortAll sorts every list of d in place.
func (d *Description) sortAll() {
	slices.SortFunc(d.States, func(a, b StateDescription) int { return cmp.Compare(a.Name, b.Name) })
	for _, s := range d.States {
		slices.Sort(s.Ignores)
	}
	slices.SortFunc(d.Events, func(a, b EventDescription) int { return strings.Compare(a.Type, b.Type) })
	for _, e := range d.Events {
		slices.Sort(e.HandledIn)
		slices.Sort(e.IgnoredIn)
	}
	slices.SortFunc(d.Transitions, func(a, b Transition) int {
		return cmp.Or(cmp.Compare(a.From, b.From), strings.Compare(a.Event, b.Event), cmp.Compare(a.To, b.To))
	})
	slices.Sort(d.Attributes)
	d.sortUnordered()
}

// clone returns a copy of s, never nil.
func clone[E any](s []E) []E {
	return append(make([]E, 0, len(s)), s...)
}

// validStrings replaces each invalid UTF-8 byte of every string in v (a
// struct, a slice or a string, settable) by U+FFFD.
func validStrings(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if s := v.String(); !utf8.ValidString(s) {
			v.SetString(string([]rune(s)))
		}
	case reflect.Struct:
		for i := range v.NumField() {
			validStrings(v.Field(i))
		}
	case reflect.Slice:
		for i := range v.Len() {
			validStrings(v.Index(i))
		}
	}
}

// FingerprintVersion prefixes every fingerprint. It changes only when the
// canonical encoding changes on purpose, which changes every fingerprint.
const FingerprintVersion = "v1"

// Fingerprint returns FingerprintVersion, a colon and the hex SHA-256 of
// the JSON encoding of d.Canonical(). Two builds of a machine have the same
// fingerprint exactly when their descriptions are equal up to declaration
// order. Strings are hashed as encoding/json writes them, so invalid UTF-8
// bytes count as U+FFFD: names differing only there collide.
func (d Description) Fingerprint() string {
	b, err := json.Marshal(d.Canonical())
	if err != nil { // a Description has only strings, ints, bools and slices
		panic(fmt.Sprintf("saga %s: encode description: %v", d.Name, err))
	}
	sum := sha256.Sum256(b)
	return FingerprintVersion + ":" + hex.EncodeToString(sum[:])
}

// Graph returns the states and transitions of d, the model that the
// console draws.
func (d Description) Graph() Graph {
	g := Graph{Name: d.Name}
	for _, s := range d.States {
		g.States = append(g.States, GraphState{Name: s.Name, Final: s.Final})
	}
	for _, t := range d.Transitions {
		g.Edges = append(g.Edges, GraphEdge{From: t.From, To: t.To, Event: t.Event, Label: shortEvent(t.Event)})
	}
	return g
}

// goTypeName names t with its package path, type arguments included:
// "example.com/shop.Order", "*example.com/shop.Order",
// "github.com/idemhq/idem/saga.Fault[example.com/shop.Charge]".
func goTypeName(t reflect.Type) string {
	if t.Kind() == reflect.Pointer {
		return "*" + goTypeName(t.Elem())
	}
	if t.Name() != "" && t.PkgPath() != "" {
		return t.PkgPath() + "." + t.Name()
	}
	return t.String()
}

// String returns the policy's stable name: "error" or "ignore".
func (p UnhandledPolicy) String() string {
	switch p {
	case UnhandledError:
		return "error"
	case UnhandledIgnore:
		return "ignore"
	}
	return fmt.Sprintf("unhandled(%d)", int(p))
}

// String returns the policy's stable name: "ignore" or "dead_letter".
func (p NotFoundPolicy) String() string {
	switch p {
	case NotFoundIgnore:
		return "ignore"
	case NotFoundDeadLetter:
		return "dead_letter"
	}
	return fmt.Sprintf("not_found(%d)", int(p))
}

package saga

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
)

// State names a state of a machine. States are declared with Machine.State
// and Machine.Final; Initial is the implicit state of a saga that does not
// exist yet.
type State string

// Initial is the pseudo-state before a saga exists; Machine.Initially
// declares the behaviours that may start a saga from it.
const Initial State = "Initial"

// Ended is the state of a saga an operator ended (the console's "end saga",
// idem sagas end): it is final, no machine declares it, and every event
// that arrives for the saga afterwards is ignored, as a final state that
// does not handle it ignores it. Declaring a state of this name panics.
const Ended State = "idem.ended"

// UnhandledPolicy says what happens to an event that arrives in a state that
// neither handles nor ignores it.
type UnhandledPolicy int

const (
	// UnhandledError fails the message with ErrUnhandled, which the engine
	// treats as permanent: the message is dead-lettered. The default.
	UnhandledError UnhandledPolicy = iota
	// UnhandledIgnore skips the message silently (it is counted).
	UnhandledIgnore
)

// NotFoundPolicy says what happens to an event for a key that has no saga
// and that cannot start one.
type NotFoundPolicy int

const (
	// NotFoundIgnore skips the message and counts it. The default.
	NotFoundIgnore NotFoundPolicy = iota
	// NotFoundDeadLetter records the message as a dead letter.
	NotFoundDeadLetter
)

// ErrUnhandled is wrapped by Apply when an event arrives in a state that does
// not handle it and the machine's UnhandledPolicy is UnhandledError.
var ErrUnhandled = errors.New("event not handled in state")

// ErrUnknownType is wrapped when a message type is not bound to an event of
// the machine.
var ErrUnknownType = errors.New("unknown message type")

// ErrMalformed is wrapped when a message body cannot be decoded into its Go
// type or fails its Validate method.
var ErrMalformed = errors.New("malformed message")

// ErrSchema is wrapped when a stored state cannot be decoded or upgraded.
var ErrSchema = errors.New("state schema")

// ErrUnknownState is wrapped when a saga's stored state is one the
// machine does not declare, or its state document is at a schema version
// newer than the machine's (the error then wraps ErrSchema too): another
// definition of the machine wrote it, a replica of a newer build in a
// rolling deploy, or an older build whose state this one removed. Apply
// touches nothing; the engine gives the message back, so that a replica
// that knows the state handles it (docs/deploys.md, "Mixed fleets").
var ErrUnknownState = errors.New("state unknown to this definition")

// Typer may be implemented by message types to choose their type name.
// Without it, a message's type name is its Go type's package-qualified name,
// for example "searchimport.SearchUploadSaved".
type Typer interface {
	MessageType() string
}

// Validator may be implemented by message types; a message whose Validate
// returns an error is malformed and is dead-lettered without retries.
type Validator interface {
	Validate() error
}

// MessageType returns the type name of msg: msg.MessageType() when msg
// implements Typer, its Go type's package-qualified name otherwise.
func MessageType(msg any) string {
	if t, ok := msg.(Typer); ok {
		return t.MessageType()
	}
	return typeName(reflect.TypeOf(msg))
}

func typeName(t reflect.Type) string {
	if t == nil {
		return "<nil>"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.String()
}

func messageTypeFor[M any]() string {
	t := reflect.TypeFor[M]()
	var v any
	if t.Kind() == reflect.Pointer {
		v = reflect.New(t.Elem()).Interface()
	} else {
		v = reflect.New(t).Elem().Interface()
	}
	if tp, ok := v.(Typer); ok {
		return tp.MessageType()
	}
	return typeName(t)
}

// Machine is the definition of a saga type: its states, the events it
// consumes and what each event does in each state. S is the saga's state
// document, which must round-trip through encoding/json.
//
// A Machine is built once, at start-up, by one goroutine; after that it is
// only read, and Apply is safe for concurrent use.
type Machine[S any] struct {
	name       string
	states     []State
	final      map[State]bool
	events     map[string]eventDef[S]
	eventOrder []string
	behaviors  map[State]map[string]*handler[S]
	unhandled  UnhandledPolicy
	notFound   NotFoundPolicy
	upgrades   map[int]func(json.RawMessage) (json.RawMessage, error)
	version    int
	faults     map[string]string       // message type -> its fault's type
	requests   map[string]requestEvent // request event type -> its request
	// requestList describes the declared requests, for Describe.
	requestList []RequestDescription
	attributes  []attribute[S]
	// migrations are the declared migrations (migrate.go): a removed
	// state's new state, and a renamed message type's new type.
	stateMoves  map[State]State
	renamed     map[string]string
	renameOrder []string
}

type eventDef[S any] struct {
	msgType   string
	goType    string // the Go type decode returns, for Describe
	decode    func(body []byte) (any, error)
	correlate func(msg any) string
}

// New returns an empty machine for saga type name. The name identifies the
// saga type in storage, so it must not change once instances exist.
func New[S any](name string) *Machine[S] {
	if name == "" {
		panic("saga: empty machine name")
	}
	return &Machine[S]{
		name:      name,
		final:     map[State]bool{},
		events:    map[string]eventDef[S]{},
		behaviors: map[State]map[string]*handler[S]{},
		upgrades:  map[int]func(json.RawMessage) (json.RawMessage, error){},
		version:   1,
	}
}

// Name returns the saga type name.
func (m *Machine[S]) Name() string { return m.name }

// State declares a non-final state and returns it.
func (m *Machine[S]) State(name string) State {
	return m.declare(name, false)
}

// Final declares a final (terminal) state and returns it. A saga that enters
// a final state is finished: it is kept, with its finish time, so that late
// duplicates are still recognised, until the engine's retention sweeps it.
// Events that a final state does not handle are ignored.
func (m *Machine[S]) Final(name string) State {
	return m.declare(name, true)
}

func (m *Machine[S]) declare(name string, final bool) State {
	s := State(name)
	if name == "" || s == Initial || s == Ended || slices.Contains(m.states, s) {
		panic(fmt.Sprintf("saga %s: invalid or duplicate state %q", m.name, name))
	}
	if _, moved := m.stateMoves[s]; moved {
		panic(fmt.Sprintf("saga %s: state %q is migrated (MigrateState): a declared state cannot be migrated", m.name, name))
	}
	m.states = append(m.states, s)
	if final {
		m.final[s] = true
	}
	return s
}

// States returns the declared states in declaration order.
func (m *Machine[S]) States() []State { return slices.Clone(m.states) }

// declares reports whether s is a state of the machine: declared, or one
// of the two every machine has (Initial, Ended).
func (m *Machine[S]) declares(s State) bool {
	return s == Initial || s == Ended || slices.Contains(m.states, s)
}

// IsFinal reports whether s is a final state: a declared final state, or
// Ended.
func (m *Machine[S]) IsFinal(s State) bool { return m.final[s] || s == Ended }

// OnUnhandled sets the policy for events a state neither handles nor
// ignores. The default is UnhandledError.
func (m *Machine[S]) OnUnhandled(p UnhandledPolicy) { m.unhandled = p }

// OnNotFound sets the policy for events that find no saga and cannot start
// one. The default is NotFoundIgnore.
func (m *Machine[S]) OnNotFound(p NotFoundPolicy) { m.notFound = p }

// NotFound returns the machine's NotFoundPolicy.
func (m *Machine[S]) NotFound() NotFoundPolicy { return m.notFound }

// Upgrade registers fn to convert a stored state document from schema
// version from to from+1. The machine's current schema version is one more
// than the highest registered from (1 when there are none). Stored
// documents are upgraded on load, before the event is applied.
func (m *Machine[S]) Upgrade(from int, fn func(old json.RawMessage) (json.RawMessage, error)) {
	if from < 1 || m.upgrades[from] != nil {
		panic(fmt.Sprintf("saga %s: invalid or duplicate upgrade from version %d", m.name, from))
	}
	m.upgrades[from] = fn
	if from+1 > m.version {
		m.version = from + 1
	}
}

// SchemaVersion returns the current schema version of the state document.
func (m *Machine[S]) SchemaVersion() int { return m.version }

// Initially declares the behaviours that may create a saga.
func (m *Machine[S]) Initially(bs ...Behavior[S]) { m.during(Initial, bs) }

// During declares what events do while the saga is in state s.
func (m *Machine[S]) During(s State, bs ...Behavior[S]) {
	if !slices.Contains(m.states, s) {
		panic(fmt.Sprintf("saga %s: During(%q): state not declared", m.name, s))
	}
	m.during(s, bs)
}

func (m *Machine[S]) during(s State, bs []Behavior[S]) {
	byEvent := m.behaviors[s]
	if byEvent == nil {
		byEvent = map[string]*handler[S]{}
		m.behaviors[s] = byEvent
	}
	for _, b := range bs {
		h := b.handler()
		if h.machine != m {
			panic(fmt.Sprintf("saga %s: behaviour for event %q belongs to another machine", m.name, h.event))
		}
		if byEvent[h.event] != nil {
			panic(fmt.Sprintf("saga %s: event %q declared twice in state %q", m.name, h.event, s))
		}
		for _, t := range h.targets {
			if !slices.Contains(m.states, t) {
				panic(fmt.Sprintf("saga %s: transition to undeclared state %q", m.name, t))
			}
		}
		byEvent[h.event] = h
	}
}

// MessageTypes returns the type names of the messages the machine consumes,
// in declaration order, then the old names of renamed types (RenameMessage).
func (m *Machine[S]) MessageTypes() []string {
	return append(slices.Clone(m.eventOrder), m.renameOrder...)
}

// Decode decodes body as the message type msgType and returns the message
// and its saga key as the event's correlation function computes it (not yet
// canonicalised). Errors wrap ErrUnknownType or ErrMalformed; a panic in
// the message's Validate method or the correlation function wraps
// ErrMalformed and ErrPanic.
func (m *Machine[S]) Decode(msgType string, body []byte) (msg any, key string, err error) {
	ev, ok := m.events[m.eventType(msgType)]
	if !ok {
		return nil, "", fmt.Errorf("saga %s: %w %q", m.name, ErrUnknownType, msgType)
	}
	defer func() {
		if p := recover(); p != nil {
			msg, key, err = nil, "", fmt.Errorf("decode %s: %w: %w: %v", msgType, ErrMalformed, ErrPanic, p)
		}
	}()
	msg, err = ev.decode(body)
	if err != nil {
		return nil, "", fmt.Errorf("decode %s: %w: %w", msgType, ErrMalformed, err)
	}
	return msg, ev.correlate(msg), nil
}

// Correlate returns the saga key of msg when its type is bound to an event
// of the machine.
func (m *Machine[S]) Correlate(msg any) (string, bool) {
	ev, ok := m.events[MessageType(msg)]
	if !ok {
		return "", false
	}
	return ev.correlate(msg), true
}

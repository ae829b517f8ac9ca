package saga

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
)

// Event binds the Go message type M to a machine with a correlation
// function that extracts the saga key from a message.
type Event[S, M any] struct {
	m       *Machine[S]
	msgType string
}

// NewEvent binds message type M to machine m. correlate returns the key of
// the saga a message is about; Idem canonicalises it (Unicode NFC, trimmed)
// and refuses empty, over-long or control-character keys. Each message type
// is bound at most once per machine; NewEvent panics otherwise.
//
// The type parameter S is inferred: saga.NewEvent[OrderPlaced](m, fn).
func NewEvent[M, S any](m *Machine[S], correlate func(M) string) *Event[S, M] {
	return bindEvent(m, messageTypeFor[M](), correlate)
}

// bindEvent binds message type name t, decoded as M, to m.
func bindEvent[M, S any](m *Machine[S], t string, correlate func(M) string) *Event[S, M] {
	if _, dup := m.events[t]; dup {
		panic(fmt.Sprintf("saga %s: message type %q bound twice", m.name, t))
	}
	if _, renamed := m.renamed[t]; renamed {
		panic(fmt.Sprintf("saga %s: message type %q is renamed (RenameMessage): bind it before renaming it, or do not rename it", m.name, t))
	}
	m.events[t] = eventDef[S]{
		msgType: t,
		goType:  goTypeName(reflect.TypeFor[M]()),
		decode: func(body []byte) (any, error) {
			var msg M
			if err := json.Unmarshal(body, &msg); err != nil {
				return nil, err
			}
			if v := reflect.ValueOf(&msg).Elem(); v.Kind() == reflect.Pointer && v.IsNil() {
				return nil, errors.New("null message")
			}
			if v, ok := any(msg).(Validator); ok {
				if err := v.Validate(); err != nil {
					return nil, err
				}
			} else if v, ok := any(&msg).(Validator); ok {
				if err := v.Validate(); err != nil {
					return nil, err
				}
			}
			return msg, nil
		},
		correlate: func(msg any) string {
			if v, ok := msg.(M); ok {
				return correlate(v)
			}
			return ""
		},
	}
	m.eventOrder = append(m.eventOrder, t)
	return &Event[S, M]{m: m, msgType: t}
}

// Name returns the event's message type name.
func (e *Event[S, M]) Name() string { return e.msgType }

// Behavior is what an event does in a state: built with When or Ignore and
// declared with Machine.Initially or Machine.During.
type Behavior[S any] interface {
	handler() *handler[S]
}

type handler[S any] struct {
	machine *Machine[S]
	event   string
	ignore  bool
	targets []State
	run     func(c *Context[S], msg any) error
}

// Ignore returns a behaviour that skips ev: the message is recorded as seen
// and nothing else happens.
func Ignore[S, M any](ev *Event[S, M]) Behavior[S] {
	return ignored[S]{&handler[S]{machine: ev.m, event: ev.msgType, ignore: true}}
}

type ignored[S any] struct{ h *handler[S] }

func (i ignored[S]) handler() *handler[S] { return i.h }

// Activity is the chain of steps an event runs: built with When, extended
// with Then, TransitionTo, If and IfElse. Steps run in order; the first
// error stops the chain and discards every change the message made.
type Activity[S, M any] struct {
	ev      *Event[S, M]
	steps   []func(c *Context[S], msg M) error
	targets []State
}

// When starts the activity for ev.
func When[S, M any](ev *Event[S, M]) *Activity[S, M] {
	return &Activity[S, M]{ev: ev}
}

// Then appends fn. fn mutates c.Data and emits through c; what it returns
// steers the engine: nil continues, an error stops the message (see the
// engine's error kinds for retry and dead-letter behaviour).
func (a *Activity[S, M]) Then(fn func(c *Context[S], msg M) error) *Activity[S, M] {
	a.steps = append(a.steps, fn)
	return a
}

// TransitionTo appends a step that moves the saga to s.
func (a *Activity[S, M]) TransitionTo(s State) *Activity[S, M] {
	a.targets = append(a.targets, s)
	a.steps = append(a.steps, func(c *Context[S], _ M) error {
		c.next = s
		return nil
	})
	return a
}

// Ignore appends a step that ends the activity and ignores the message: it
// is recorded as seen and every change the earlier steps made is
// discarded, as with the Ignore behaviour. Used in a branch, it ignores
// messages conditionally, for example stale copies:
//
//	saga.When(confirmed).
//		If(isStale, func(b *saga.Activity[Mission, Confirmed]) *saga.Activity[Mission, Confirmed] { return b.Ignore() }).
//		Then(confirm)
func (a *Activity[S, M]) Ignore() *Activity[S, M] {
	a.steps = append(a.steps, func(*Context[S], M) error { return errIgnore })
	return a
}

// errIgnore stops an activity whose message is to be ignored.
var errIgnore = errors.New("saga: message ignored")

// If appends a branch that runs then's steps when cond holds.
func (a *Activity[S, M]) If(cond func(c *Context[S], msg M) bool, then func(b *Activity[S, M]) *Activity[S, M]) *Activity[S, M] {
	return a.IfElse(cond, then, func(b *Activity[S, M]) *Activity[S, M] { return b })
}

// IfElse appends a branch that runs then's steps when cond holds and els's
// steps otherwise. then and els receive a fresh activity to extend.
func (a *Activity[S, M]) IfElse(cond func(c *Context[S], msg M) bool, then, els func(b *Activity[S, M]) *Activity[S, M]) *Activity[S, M] {
	t := then(&Activity[S, M]{ev: a.ev})
	e := els(&Activity[S, M]{ev: a.ev})
	a.targets = append(a.targets, t.targets...)
	a.targets = append(a.targets, e.targets...)
	a.steps = append(a.steps, func(c *Context[S], msg M) error {
		if cond(c, msg) {
			return t.runSteps(c, msg)
		}
		return e.runSteps(c, msg)
	})
	return a
}

func (a *Activity[S, M]) runSteps(c *Context[S], msg M) error {
	for _, step := range a.steps {
		if err := step(c, msg); err != nil {
			return err
		}
	}
	return nil
}

func (a *Activity[S, M]) handler() *handler[S] {
	return &handler[S]{
		machine: a.ev.m,
		event:   a.ev.msgType,
		targets: a.targets,
		run: func(c *Context[S], msg any) error {
			m, ok := msg.(M)
			if !ok {
				return fmt.Errorf("%w: got %T for event %s", ErrMalformed, msg, a.ev.msgType)
			}
			return a.runSteps(c, m)
		},
	}
}

// ErrPanic is wrapped by Apply when a handler panicked; the engine treats
// it as permanent.
var ErrPanic = errors.New("handler panicked")

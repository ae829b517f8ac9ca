package saga_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/idemhq/idem/saga"
)

type plainMsg struct{ ID string }

// namedByValue chooses its type name with a value receiver.
type namedByValue struct{ ID string }

func (namedByValue) MessageType() string { return "orders.v1.Named" }

// namedByPointer chooses its type name with a pointer receiver only.
type namedByPointer struct{ ID string }

func (*namedByPointer) MessageType() string { return "orders.v1.NamedPtr" }

type aliasString string

func TestMessageType(t *testing.T) {
	tests := []struct {
		name string
		msg  any
		want string
	}{
		{"value", plainMsg{}, "saga_test.plainMsg"},
		{"pointer", &plainMsg{}, "saga_test.plainMsg"},
		{"pointer to pointer", new(*plainMsg), "saga_test.plainMsg"},
		{"nil pointer", (*plainMsg)(nil), "saga_test.plainMsg"},
		{"typer value receiver, value", namedByValue{}, "orders.v1.Named"},
		{"typer value receiver, pointer", &namedByValue{}, "orders.v1.Named"},
		{"typer pointer receiver, pointer", &namedByPointer{}, "orders.v1.NamedPtr"},
		{"typer pointer receiver, value", namedByPointer{}, "saga_test.namedByPointer"},
		{"named basic type", aliasString("x"), "saga_test.aliasString"},
		{"builtin", 42, "int"},
		{"nil", nil, "<nil>"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := saga.MessageType(tt.msg); got != tt.want {
				t.Errorf("MessageType(%#v): got %q, want %q", tt.msg, got, tt.want)
			}
		})
	}
}

// TestEventName checks that the name NewEvent binds is the name MessageType
// gives a message of that type, so that emitted messages find their event.
func TestEventName(t *testing.T) {
	m := saga.New[Order]("names")
	tests := []struct {
		name string
		got  string
		msg  any
	}{
		{"value", saga.NewEvent[plainMsg](m, func(plainMsg) string { return "" }).Name(), plainMsg{}},
		{"typer value receiver", saga.NewEvent[namedByValue](m, func(namedByValue) string { return "" }).Name(), namedByValue{}},
		{"typer pointer receiver, pointer type", saga.NewEvent[*namedByPointer](m, func(*namedByPointer) string { return "" }).Name(), &namedByPointer{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if want := saga.MessageType(tt.msg); tt.got != want {
				t.Errorf("Event.Name: got %q, want %q", tt.got, want)
			}
		})
	}
	want := []string{"saga_test.plainMsg", "orders.v1.Named", "orders.v1.NamedPtr"}
	if got := m.MessageTypes(); !slices.Equal(got, want) {
		t.Errorf("MessageTypes: got %q, want %q", got, want)
	}
}

var errTooBig = errors.New("amount too big")

// checkedByValue validates with a value receiver.
type checkedByValue struct {
	Key    string `json:"key"`
	Amount int    `json:"amount"`
}

func (c checkedByValue) Validate() error {
	if c.Amount > 10 {
		return errTooBig
	}
	return nil
}

// checkedByPointer validates with a pointer receiver.
type checkedByPointer struct {
	Key    string `json:"key"`
	Amount int    `json:"amount"`
}

func (c *checkedByPointer) Validate() error {
	if c.Amount > 10 {
		return errTooBig
	}
	return nil
}

func TestDecode(t *testing.T) {
	m := saga.New[Order]("decode")
	saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	saga.NewEvent[checkedByValue](m, func(e checkedByValue) string { return e.Key })
	saga.NewEvent[checkedByPointer](m, func(e checkedByPointer) string { return e.Key })
	saga.NewEvent[*namedByPointer](m, func(e *namedByPointer) string { return e.ID })

	placed := saga.MessageType(OrderPlaced{})
	byValue := saga.MessageType(checkedByValue{})
	byPointer := saga.MessageType(checkedByPointer{})
	tests := []struct {
		name    string
		msgType string
		body    string
		wantMsg any
		wantKey string
		wantErr []error // every error must be wrapped
	}{
		{"valid", placed, `{"order_id":"o-1","total":7}`, OrderPlaced{OrderID: "o-1", Total: 7}, "o-1", nil},
		{"unknown fields are ignored", placed, `{"order_id":"o-2","extra":true}`, OrderPlaced{OrderID: "o-2"}, "o-2", nil},
		{"key not canonicalised", placed, `{"order_id":" o-3 "}`, OrderPlaced{OrderID: " o-3 "}, " o-3 ", nil},
		{"pointer message type", "orders.v1.NamedPtr", `{"ID":"n-1"}`, &namedByPointer{ID: "n-1"}, "n-1", nil},
		{"unknown type", "saga_test.Nope", `{}`, nil, "", []error{saga.ErrUnknownType}},
		{"malformed json", placed, `{"order_id":`, nil, "", []error{saga.ErrMalformed}},
		{"wrong field type", placed, `{"order_id":42}`, nil, "", []error{saga.ErrMalformed}},
		{"not an object", placed, `[1,2]`, nil, "", []error{saga.ErrMalformed}},
		{"validate value receiver passes", byValue, `{"key":"k","amount":10}`, checkedByValue{Key: "k", Amount: 10}, "k", nil},
		{"validate value receiver fails", byValue, `{"key":"k","amount":11}`, nil, "", []error{saga.ErrMalformed, errTooBig}},
		{"validate pointer receiver passes", byPointer, `{"key":"k","amount":1}`, checkedByPointer{Key: "k", Amount: 1}, "k", nil},
		{"validate pointer receiver fails", byPointer, `{"key":"k","amount":11}`, nil, "", []error{saga.ErrMalformed, errTooBig}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg, key, err := m.Decode(tt.msgType, []byte(tt.body))
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Decode(%q, %s): got error %v, want nil", tt.msgType, tt.body, err)
				}
			} else {
				for _, want := range tt.wantErr {
					if !errors.Is(err, want) {
						t.Errorf("Decode(%q, %s): got error %v, want it to wrap %v", tt.msgType, tt.body, err, want)
					}
				}
				if msg != nil || key != "" {
					t.Errorf("Decode(%q, %s) failed but returned msg %#v, key %q; want nil, \"\"", tt.msgType, tt.body, msg, key)
				}
			}
			if !reflect.DeepEqual(msg, tt.wantMsg) {
				t.Errorf("Decode(%q, %s) msg: got %#v, want %#v", tt.msgType, tt.body, msg, tt.wantMsg)
			}
			if key != tt.wantKey {
				t.Errorf("Decode(%q, %s) key: got %q, want %q", tt.msgType, tt.body, key, tt.wantKey)
			}
		})
	}
}

// TestDecodeRoundTrip checks that what a handler emits decodes, under the
// emitted type name, into an equal message of a machine that consumes it.
func TestDecodeRoundTrip(t *testing.T) {
	m := saga.New[Order]("roundtrip")
	saga.NewEvent[namedByValue](m, func(e namedByValue) string { return e.ID })
	sent := namedByValue{ID: "x-1"}
	msg, key, err := m.Decode(saga.MessageType(sent), mustJSON(sent))
	if err != nil {
		t.Fatalf("Decode: got error %v, want nil", err)
	}
	if msg != sent || key != "x-1" {
		t.Errorf("Decode: got %#v, %q; want %#v, %q", msg, key, sent, "x-1")
	}
}

func TestCorrelate(t *testing.T) {
	f := newOrderFixture()
	tests := []struct {
		name   string
		msg    any
		want   string
		wantOK bool
	}{
		{"bound type", PaymentReceived{OrderID: "o-9"}, "o-9", true},
		{"unbound type", ShipOrder{OrderID: "o-9"}, "", false},
		// A pointer has the same type name as its value but is not the bound
		// Go type: the correlation function cannot run on it.
		{"pointer to bound type", &PaymentReceived{OrderID: "o-9"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := f.m.Correlate(tt.msg)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Correlate(%#v): got %q, %v; want %q, %v", tt.msg, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestMachineAccessors(t *testing.T) {
	f := newOrderFixture()
	if got, want := f.m.Name(), "order"; got != want {
		t.Errorf("Name: got %q, want %q", got, want)
	}
	wantStates := []saga.State{"AwaitingPayment", "Paid", "Cancelled"}
	states := f.m.States()
	if !slices.Equal(states, wantStates) {
		t.Errorf("States: got %q, want %q", states, wantStates)
	}
	states[0] = "Mutated"
	if got := f.m.States(); !slices.Equal(got, wantStates) {
		t.Errorf("States after mutating the returned slice: got %q, want %q", got, wantStates)
	}
	for _, tt := range []struct {
		s    saga.State
		want bool
	}{{saga.Initial, false}, {f.awaiting, false}, {f.paid, true}, {f.cancelled, true}, {"Undeclared", false}} {
		if got := f.m.IsFinal(tt.s); got != tt.want {
			t.Errorf("IsFinal(%q): got %v, want %v", tt.s, got, tt.want)
		}
	}
	wantTypes := []string{"saga_test.OrderPlaced", "saga_test.PaymentReceived", "saga_test.OrderCancelled", "saga_test.RefundRequested"}
	if got := f.m.MessageTypes(); !slices.Equal(got, wantTypes) {
		t.Errorf("MessageTypes: got %q, want %q", got, wantTypes)
	}
	if got := f.m.NotFound(); got != saga.NotFoundIgnore {
		t.Errorf("NotFound default: got %v, want NotFoundIgnore", got)
	}
	f.m.OnNotFound(saga.NotFoundDeadLetter)
	if got := f.m.NotFound(); got != saga.NotFoundDeadLetter {
		t.Errorf("NotFound after OnNotFound(NotFoundDeadLetter): got %v, want NotFoundDeadLetter", got)
	}
}

func TestOutcomeString(t *testing.T) {
	tests := []struct {
		o    saga.Outcome
		want string
	}{
		{saga.Applied, "applied"},
		{saga.Ignored, "ignored"},
		{saga.NotFound, "not_found"},
		{saga.Outcome(0), "outcome(0)"},
		{saga.Outcome(9), "outcome(9)"},
	}
	for _, tt := range tests {
		if got := tt.o.String(); got != tt.want {
			t.Errorf("Outcome(%d).String(): got %q, want %q", int(tt.o), got, tt.want)
		}
	}
}

func TestSchemaVersion(t *testing.T) {
	noop := func(old json.RawMessage) (json.RawMessage, error) { return old, nil }
	tests := []struct {
		name string
		from []int
		want int
	}{
		{"no upgrades", nil, 1},
		{"one upgrade", []int{1}, 2},
		{"two upgrades", []int{1, 2}, 3},
		{"registered out of order", []int{2, 1}, 3},
		{"gap", []int{1, 3}, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := saga.New[Order]("v")
			for _, from := range tt.from {
				m.Upgrade(from, noop)
			}
			if got := m.SchemaVersion(); got != tt.want {
				t.Errorf("SchemaVersion after Upgrade%v: got %d, want %d", tt.from, got, tt.want)
			}
		})
	}
}

func TestMachinePanics(t *testing.T) {
	type fixture struct {
		m          *saga.Machine[Order]
		open, done saga.State
		placed     *saga.Event[Order, OrderPlaced]
		payment    *saga.Event[Order, PaymentReceived]
	}
	setup := func() fixture {
		m := saga.New[Order]("panics")
		return fixture{
			m:       m,
			open:    m.State("Open"),
			done:    m.Final("Done"),
			placed:  saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID }),
			payment: saga.NewEvent[PaymentReceived](m, func(e PaymentReceived) string { return e.OrderID }),
		}
	}
	tests := []struct {
		name string
		fn   func(f fixture)
		want string // substring of the panic message
	}{
		{"empty machine name", func(fixture) { saga.New[Order]("") }, "empty machine name"},
		{"During on undeclared state", func(f fixture) {
			f.m.During("Nowhere", saga.Ignore(f.placed))
		}, `During("Nowhere"): state not declared`},
		{"During on Initial", func(f fixture) {
			f.m.During(saga.Initial, saga.Ignore(f.placed))
		}, `During("Initial"): state not declared`},
		{"duplicate state", func(f fixture) { f.m.State("Open") }, `duplicate state "Open"`},
		{"final duplicating a state", func(f fixture) { f.m.Final("Open") }, `duplicate state "Open"`},
		{"state duplicating a final", func(f fixture) { f.m.State("Done") }, `duplicate state "Done"`},
		{"state named Initial", func(f fixture) { f.m.State("Initial") }, `invalid or duplicate state "Initial"`},
		{"empty state name", func(f fixture) { f.m.Final("") }, `invalid or duplicate state ""`},
		{"transition to undeclared state", func(f fixture) {
			f.m.During(f.open, saga.When(f.placed).TransitionTo("Nowhere"))
		}, `transition to undeclared state "Nowhere"`},
		{"initially transition to undeclared state", func(f fixture) {
			f.m.Initially(saga.When(f.placed).TransitionTo("Nowhere"))
		}, `transition to undeclared state "Nowhere"`},
		{"transition to Initial", func(f fixture) {
			f.m.During(f.open, saga.When(f.placed).TransitionTo(saga.Initial))
		}, `transition to undeclared state "Initial"`},
		{"transition to undeclared state in a nested branch", func(f fixture) {
			f.m.During(f.open, saga.When(f.placed).IfElse(
				func(*saga.Context[Order], OrderPlaced) bool { return true },
				func(b *saga.Activity[Order, OrderPlaced]) *saga.Activity[Order, OrderPlaced] {
					return b.TransitionTo(f.done)
				},
				func(b *saga.Activity[Order, OrderPlaced]) *saga.Activity[Order, OrderPlaced] {
					return b.If(func(*saga.Context[Order], OrderPlaced) bool { return true },
						func(b *saga.Activity[Order, OrderPlaced]) *saga.Activity[Order, OrderPlaced] {
							return b.TransitionTo("Nowhere")
						})
				}))
		}, `transition to undeclared state "Nowhere"`},
		{"event twice in one call", func(f fixture) {
			f.m.During(f.open, saga.Ignore(f.placed), saga.When(f.placed))
		}, `event "saga_test.OrderPlaced" declared twice in state "Open"`},
		{"event twice across calls", func(f fixture) {
			f.m.During(f.open, saga.When(f.placed))
			f.m.During(f.open, saga.Ignore(f.placed))
		}, `event "saga_test.OrderPlaced" declared twice in state "Open"`},
		{"event twice in Initially", func(f fixture) {
			f.m.Initially(saga.When(f.placed).TransitionTo(f.open))
			f.m.Initially(saga.When(f.placed).TransitionTo(f.done))
		}, `event "saga_test.OrderPlaced" declared twice in state "Initial"`},
		{"behaviour from another machine", func(f fixture) {
			other := saga.New[Order]("other")
			ev := saga.NewEvent[OrderCancelled](other, func(e OrderCancelled) string { return e.OrderID })
			f.m.During(f.open, saga.When(ev))
		}, `behaviour for event "saga_test.OrderCancelled" belongs to another machine`},
		{"ignore from another machine", func(f fixture) {
			other := saga.New[Order]("other")
			ev := saga.NewEvent[OrderPlaced](other, func(e OrderPlaced) string { return e.OrderID })
			f.m.Initially(saga.Ignore(ev))
		}, "belongs to another machine"},
		{"message type bound twice", func(f fixture) {
			saga.NewEvent[OrderPlaced](f.m, func(e OrderPlaced) string { return "" })
		}, `message type "saga_test.OrderPlaced" bound twice`},
		{"pointer and value bound", func(f fixture) {
			saga.NewEvent[*OrderPlaced](f.m, func(e *OrderPlaced) string { return "" })
		}, `message type "saga_test.OrderPlaced" bound twice`},
		{"typer name bound twice", func(f fixture) {
			saga.NewEvent[namedByValue](f.m, func(namedByValue) string { return "" })
			saga.NewEvent[*namedByPointer](f.m, func(*namedByPointer) string { return "" })
			saga.NewEvent[*namedByValue](f.m, func(*namedByValue) string { return "" })
		}, `message type "orders.v1.Named" bound twice`},
		{"the reserved Ended state", func(f fixture) {
			f.m.State(string(saga.Ended))
		}, `invalid or duplicate state "idem.ended"`},
		{"upgrade from version 0", func(f fixture) {
			f.m.Upgrade(0, func(b json.RawMessage) (json.RawMessage, error) { return b, nil })
		}, "invalid or duplicate upgrade from version 0"},
		{"upgrade registered twice", func(f fixture) {
			f.m.Upgrade(1, func(b json.RawMessage) (json.RawMessage, error) { return b, nil })
			f.m.Upgrade(1, func(b json.RawMessage) (json.RawMessage, error) { return b, nil })
		}, "invalid or duplicate upgrade from version 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := setup()
			got := mustPanic(t, func() { tt.fn(f) })
			if !strings.Contains(got, tt.want) {
				t.Errorf("panic: got %q, want it to contain %q", got, tt.want)
			}
		})
	}
}

// TestDecodeNeverPanics checks that hostile bodies and panicking user code
// (Validate, the correlation function) make Decode fail with ErrMalformed
// instead of panicking: the engine decodes untrusted input without recover.
func TestDecodeNeverPanics(t *testing.T) {
	tests := []struct {
		name    string
		bind    func(m *saga.Machine[Order])
		body    string
		wantErr []error
	}{
		{"null for pointer type, value-receiver Validate", func(m *saga.Machine[Order]) {
			saga.NewEvent[*checkedByValue](m, func(e *checkedByValue) string { return e.Key })
		}, `null`, []error{saga.ErrMalformed}},
		{"null for pointer type, pointer-receiver Validate", func(m *saga.Machine[Order]) {
			saga.NewEvent[*checkedByPointer](m, func(e *checkedByPointer) string { return e.Key })
		}, `null`, []error{saga.ErrMalformed}},
		{"null for pointer type, correlation dereferences", func(m *saga.Machine[Order]) {
			saga.NewEvent[*OrderPlaced](m, func(e *OrderPlaced) string { return e.OrderID })
		}, `null`, []error{saga.ErrMalformed}},
		{"null for pointer type, correlation does not dereference", func(m *saga.Machine[Order]) {
			saga.NewEvent[*OrderPlaced](m, func(*OrderPlaced) string { return "k" })
		}, `null`, []error{saga.ErrMalformed}},
		{"correlation panics", func(m *saga.Machine[Order]) {
			saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID[:3] })
		}, `{"order_id":"x"}`, []error{saga.ErrMalformed, saga.ErrPanic}},
		{"Validate panics", func(m *saga.Machine[Order]) {
			saga.NewEvent[panickyValidate](m, func(panickyValidate) string { return "k" })
		}, `{}`, []error{saga.ErrMalformed, saga.ErrPanic}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := saga.New[Order]("hostile")
			tt.bind(m)
			typ := m.MessageTypes()[0]
			var (
				msg any
				key string
				err error
			)
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("Decode(%q, %s) panicked: %v", typ, tt.body, p)
					}
				}()
				msg, key, err = m.Decode(typ, []byte(tt.body))
			}()
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("Decode(%q, %s): got error %v, want it to wrap %v", typ, tt.body, err, want)
				}
			}
			if msg != nil || key != "" {
				t.Errorf("Decode(%q, %s): got %#v, %q; want nil, \"\"", typ, tt.body, msg, key)
			}
		})
	}
}

type panickyValidate struct{ Items []int }

func (p panickyValidate) Validate() error {
	_ = p.Items[0]
	return nil
}

package saga_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/idemhq/idem/saga"
)

func TestValidateComplete(t *testing.T) {
	if err := newOrderFixture().m.Validate(); err != nil {
		t.Errorf("Validate of the order fixture: got %v, want nil", err)
	}
}

// validateCase builds a machine with the events OrderPlaced ("placed") and
// OrderCancelled ("cancel") and the states Open and Done (final).
type validateCase struct {
	m          *saga.Machine[Order]
	open, done saga.State
	placed     *saga.Event[Order, OrderPlaced]
	cancel     *saga.Event[Order, OrderCancelled]
}

func newValidateCase() validateCase {
	m := saga.New[Order]("validate")
	c := validateCase{m: m, open: m.State("Open"), done: m.Final("Done")}
	c.placed = saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	c.cancel = saga.NewEvent[OrderCancelled](m, func(e OrderCancelled) string { return e.OrderID })
	return c
}

func TestValidateProblems(t *testing.T) {
	const (
		placed = "saga_test.OrderPlaced"
		cancel = "saga_test.OrderCancelled"
	)
	tests := []struct {
		name  string
		build func(c validateCase)
		want  []saga.Problem
	}{
		{"complete", func(c validateCase) {
			c.m.Initially(saga.When(c.placed).TransitionTo(c.open))
			c.m.During(c.open, saga.Ignore(c.placed), saga.When(c.cancel).TransitionTo(c.done))
		}, nil},
		{"final states are never unhandled", func(c validateCase) {
			c.m.Initially(saga.When(c.placed).TransitionTo(c.open), saga.When(c.cancel).TransitionTo(c.done))
			c.m.During(c.open, saga.Ignore(c.placed), saga.Ignore(c.cancel))
		}, nil},
		{"state reached only through a branch", func(c validateCase) {
			c.m.Initially(saga.When(c.placed).If(func(*saga.Context[Order], OrderPlaced) bool { return false },
				func(b *saga.Activity[Order, OrderPlaced]) *saga.Activity[Order, OrderPlaced] {
					return b.TransitionTo(c.open)
				}))
			c.m.During(c.open, saga.Ignore(c.placed), saga.When(c.cancel).TransitionTo(c.done))
		}, nil},
		{"unhandled pair", func(c validateCase) {
			c.m.Initially(saga.When(c.placed).TransitionTo(c.open), saga.When(c.cancel).TransitionTo(c.done))
			c.m.During(c.open, saga.When(c.placed))
		}, []saga.Problem{{Kind: "unhandled", State: "Open", Event: cancel}}},
		{"unhandled pairs of a state without behaviours", func(c validateCase) {
			c.m.Initially(saga.When(c.placed).TransitionTo(c.open), saga.When(c.cancel).TransitionTo(c.done))
		}, []saga.Problem{
			{Kind: "unhandled", State: "Open", Event: placed},
			{Kind: "unhandled", State: "Open", Event: cancel},
		}},
		{"unreachable state", func(c validateCase) {
			c.m.Initially(saga.When(c.placed).TransitionTo(c.done), saga.When(c.cancel).TransitionTo(c.done))
			c.m.During(c.open, saga.When(c.placed), saga.When(c.cancel))
		}, []saga.Problem{{Kind: "unreachable", State: "Open"}}},
		{"unreachable final state", func(c validateCase) {
			c.m.Initially(saga.When(c.placed).TransitionTo(c.open))
			c.m.During(c.open, saga.When(c.placed), saga.When(c.cancel))
		}, []saga.Problem{{Kind: "unreachable", State: "Done"}}},
		{"unconsumed event", func(c validateCase) {
			c.m.Initially(saga.When(c.placed).TransitionTo(c.open), saga.Ignore(c.cancel))
			c.m.During(c.open, saga.When(c.placed).TransitionTo(c.done), saga.Ignore(c.cancel))
		}, []saga.Problem{{Kind: "unconsumed", Event: cancel}}},
		{"event consumed only in an unreachable state", func(c validateCase) {
			c.m.Initially(saga.When(c.placed).TransitionTo(c.done))
			c.m.During(c.open, saga.When(c.placed), saga.When(c.cancel))
		}, []saga.Problem{
			{Kind: "unreachable", State: "Open"},
			{Kind: "unconsumed", Event: cancel},
		}},
		{"no initial", func(c validateCase) {
			c.m.During(c.open, saga.When(c.placed).TransitionTo(c.done), saga.When(c.cancel))
		}, []saga.Problem{
			{Kind: "no_initial"},
			{Kind: "unreachable", State: "Open"},
			{Kind: "unreachable", State: "Done"},
			{Kind: "unconsumed", Event: placed},
			{Kind: "unconsumed", Event: cancel},
		}},
		{"empty machine", func(validateCase) {}, []saga.Problem{
			{Kind: "no_initial"},
			{Kind: "unreachable", State: "Open"},
			{Kind: "unreachable", State: "Done"},
			{Kind: "unconsumed", Event: placed},
			{Kind: "unconsumed", Event: cancel},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newValidateCase()
			tt.build(c)
			err := c.m.Validate()
			got := problems(t, err)
			if !slices.Equal(got, tt.want) {
				t.Fatalf("Validate problems:\ngot  %+v\nwant %+v\n(error: %s)", got, tt.want, errText(err))
			}
			if tt.want == nil {
				return
			}
			// The joined error matches its first problem directly too.
			var p *saga.Problem
			if !errors.As(err, &p) || *p != tt.want[0] {
				t.Errorf("errors.As(Validate(), *Problem): got %+v, want %+v", p, tt.want[0])
			}
			if again := problems(t, c.m.Validate()); !slices.Equal(again, got) {
				t.Errorf("second Validate: got %+v, want %+v", again, got)
			}
		})
	}
}

func TestValidateUnhandledIgnore(t *testing.T) {
	tests := []struct {
		name   string
		policy saga.UnhandledPolicy
		want   []saga.Problem
	}{
		{"UnhandledError reports", saga.UnhandledError, []saga.Problem{
			{Kind: "unhandled", State: "Open", Event: "saga_test.OrderCancelled"},
			{Kind: "unconsumed", Event: "saga_test.OrderCancelled"},
		}},
		{"UnhandledIgnore suppresses unhandled pairs only", saga.UnhandledIgnore, []saga.Problem{
			{Kind: "unconsumed", Event: "saga_test.OrderCancelled"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newValidateCase()
			c.m.OnUnhandled(tt.policy)
			c.m.Initially(saga.When(c.placed).TransitionTo(c.open))
			c.m.During(c.open, saga.When(c.placed).TransitionTo(c.done))
			if got := problems(t, c.m.Validate()); !slices.Equal(got, tt.want) {
				t.Errorf("Validate problems:\ngot  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestProblemError(t *testing.T) {
	tests := []struct {
		p    saga.Problem
		want string
	}{
		{saga.Problem{Kind: "unhandled", State: "Open", Event: "x.Ev"}, "state Open neither handles nor ignores event x.Ev"},
		{saga.Problem{Kind: "unreachable", State: "Open"}, "state Open is unreachable"},
		{saga.Problem{Kind: "unconsumed", Event: "x.Ev"}, "event x.Ev can never start or reach a saga"},
		{saga.Problem{Kind: "no_initial"}, "no behaviour in Initially: no event can start a saga"},
		{saga.Problem{Kind: "other"}, "other"},
	}
	for _, tt := range tests {
		if got := tt.p.Error(); got != tt.want {
			t.Errorf("%+v.Error(): got %q, want %q", tt.p, got, tt.want)
		}
	}
}

// Box is a generic message type: its type name carries its type argument's
// package path.
type Box[X any] struct{ V X }

// diagramMachines returns the machines whose diagrams are compared with
// golden strings.
func diagramMachines() map[string]func() interface {
	Mermaid() string
	DOT() string
} {
	type diagrammer = interface {
		Mermaid() string
		DOT() string
	}
	return map[string]func() diagrammer{
		"order": func() diagrammer { return newOrderFixture().m },
		// Review repeats transition targets across branches, uses a Typer
		// name with dots and a generic message type.
		"review": func() diagrammer {
			m := saga.New[Order]("review")
			pending, approved, rejected := m.State("Pending"), m.Final("Approved"), m.Final("Rejected")
			submitted := saga.NewEvent[Box[OrderPlaced]](m, func(Box[OrderPlaced]) string { return "" })
			vote := saga.NewEvent[namedByValue](m, func(namedByValue) string { return "" })
			yes := func(*saga.Context[Order], namedByValue) bool { return true }
			type act = saga.Activity[Order, namedByValue]
			m.Initially(saga.When(submitted).TransitionTo(pending))
			m.During(pending, saga.Ignore(submitted), saga.When(vote).
				If(yes, func(b *act) *act { return b.TransitionTo(approved) }).
				If(yes, func(b *act) *act { return b.TransitionTo(rejected) }).
				If(yes, func(b *act) *act { return b.TransitionTo(approved) }))
			return m
		},
	}
}

func TestMermaid(t *testing.T) {
	tests := []struct {
		machine string
		want    string
	}{
		{"order", `stateDiagram-v2
    [*] --> AwaitingPayment: OrderPlaced
    AwaitingPayment --> Paid: PaymentReceived
    AwaitingPayment --> Cancelled: OrderCancelled
    Paid --> Paid: RefundRequested
    Paid --> [*]
    Cancelled --> [*]
`},
		{"review", `stateDiagram-v2
    [*] --> Pending: Box[OrderPlaced]
    Pending --> Approved: Named
    Pending --> Rejected: Named
    Approved --> [*]
    Rejected --> [*]
`},
	}
	for _, tt := range tests {
		t.Run(tt.machine, func(t *testing.T) {
			build := diagramMachines()[tt.machine]
			m := build()
			got := m.Mermaid()
			if got != tt.want {
				t.Errorf("Mermaid:\ngot\n%s\nwant\n%s", got, tt.want)
			}
			if again := m.Mermaid(); again != got {
				t.Errorf("second Mermaid differs:\nfirst\n%s\nsecond\n%s", got, again)
			}
			if other := build().Mermaid(); other != got {
				t.Errorf("Mermaid of an identically built machine differs:\nfirst\n%s\nsecond\n%s", got, other)
			}
		})
	}
}

func TestDOT(t *testing.T) {
	tests := []struct {
		machine string
		want    string
	}{
		{"order", `digraph "order" {
    rankdir=LR;
    "Initial" [shape=point];
    "AwaitingPayment" [shape=box];
    "Paid" [shape=doublecircle];
    "Cancelled" [shape=doublecircle];
    "Initial" -> "AwaitingPayment" [label="OrderPlaced"];
    "AwaitingPayment" -> "Paid" [label="PaymentReceived"];
    "AwaitingPayment" -> "Cancelled" [label="OrderCancelled"];
    "Paid" -> "Paid" [label="RefundRequested"];
}
`},
		{"review", `digraph "review" {
    rankdir=LR;
    "Initial" [shape=point];
    "Pending" [shape=box];
    "Approved" [shape=doublecircle];
    "Rejected" [shape=doublecircle];
    "Initial" -> "Pending" [label="Box[OrderPlaced]"];
    "Pending" -> "Approved" [label="Named"];
    "Pending" -> "Rejected" [label="Named"];
}
`},
	}
	for _, tt := range tests {
		t.Run(tt.machine, func(t *testing.T) {
			build := diagramMachines()[tt.machine]
			m := build()
			got := m.DOT()
			if got != tt.want {
				t.Errorf("DOT:\ngot\n%s\nwant\n%s", got, tt.want)
			}
			if again := m.DOT(); again != got {
				t.Errorf("second DOT differs:\nfirst\n%s\nsecond\n%s", got, again)
			}
			if other := build().DOT(); other != got {
				t.Errorf("DOT of an identically built machine differs:\nfirst\n%s\nsecond\n%s", got, other)
			}
		})
	}
}

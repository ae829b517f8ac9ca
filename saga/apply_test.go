package saga_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/saga"
)

func TestApplyOutcomes(t *testing.T) {
	f := newOrderFixture()
	paymentIn := existing(f.awaiting, f.awaitingData, f.paymentMsg)
	mismatched := existing(f.awaiting, f.awaitingData, f.placedMsg)
	mismatched.MsgType = f.paymentType
	corrupt := existing(f.awaiting, []byte(`{"id":`), f.paymentMsg)
	tests := []struct {
		name         string
		in           saga.Input
		wantOutcome  saga.Outcome
		wantFrom     saga.State
		wantTo       saga.State
		wantFinished bool
		wantData     *Order // nil: Result.Data must be nil
		wantErr      error
	}{
		{"initially creates", newInput(f.placedMsg), saga.Applied, saga.Initial, f.awaiting, false, &f.placedOrder, nil},
		{"transition", paymentIn, saga.Applied, f.awaiting, f.paid, true,
			&Order{ID: "o-1", Total: 100, Paid: 100}, nil},
		{"transition to other final", existing(f.awaiting, f.awaitingData, f.cancelMsg), saga.Applied, f.awaiting, f.cancelled, true,
			&f.awaitingOrder, nil},
		{"missing saga, event cannot start one", newInput(f.paymentMsg), saga.NotFound, saga.Initial, saga.Initial, false, nil, nil},
		{"missing saga, another event", newInput(f.refundMsg), saga.NotFound, saga.Initial, saga.Initial, false, nil, nil},
		{"ignored", existing(f.awaiting, f.awaitingData, f.placedMsg), saga.Ignored, f.awaiting, f.awaiting, false, nil, nil},
		{"final state ignores unhandled", existing(f.cancelled, f.awaitingData, f.paymentMsg), saga.Ignored, f.cancelled, f.cancelled, false, nil, nil},
		{"final state ignores the creating event", existing(f.paid, f.paidData, f.placedMsg), saga.Ignored, f.paid, f.paid, false, nil, nil},
		{"final state handles explicitly", existing(f.paid, f.paidData, f.refundMsg), saga.Applied, f.paid, f.paid, true,
			&Order{ID: "o-1", Total: 100, Paid: 100, Refunded: 40}, nil},
		{"an ended saga ignores every event", existing(saga.Ended, f.awaitingData, f.paymentMsg), saga.Ignored, saga.Ended, saga.Ended, false, nil, nil},
		{"an ended saga ignores the creating event", existing(saga.Ended, f.awaitingData, f.placedMsg), saga.Ignored, saga.Ended, saga.Ended, false, nil, nil},
		{"unknown message type", existing(f.awaiting, f.awaitingData, ShipOrder{}), 0, "", "", false, nil, saga.ErrUnknownType},
		{"message does not match its type name", mismatched, 0, "", "", false, nil, saga.ErrMalformed},
		{"corrupt stored document", corrupt, 0, "", "", false, nil, saga.ErrSchema},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := f.m.Apply(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Apply: got error %v, want %v", err, tt.wantErr)
			}
			if got, want := res.Outcome, tt.wantOutcome; got != want {
				t.Errorf("Outcome: got %v, want %v", got, want)
			}
			if res.From != tt.wantFrom || res.To != tt.wantTo {
				t.Errorf("From, To: got %q, %q; want %q, %q", res.From, res.To, tt.wantFrom, tt.wantTo)
			}
			if res.Finished != tt.wantFinished {
				t.Errorf("Finished: got %v, want %v", res.Finished, tt.wantFinished)
			}
			if tt.wantData == nil {
				if res.Data != nil {
					t.Errorf("Data: got %s, want nil", res.Data)
				}
				if res.Emitted != nil || res.Scheduled != nil || res.Unscheduled != nil || res.Logs != nil {
					t.Errorf("effects: got %+v, want none", res)
				}
				return
			}
			if got := decodeData[Order](t, res.Data); !reflect.DeepEqual(got, *tt.wantData) {
				t.Errorf("Data: got %+v, want %+v", got, *tt.wantData)
			}
			if got, want := res.SchemaVersion, 1; got != want {
				t.Errorf("SchemaVersion: got %d, want %d", got, want)
			}
		})
	}
}

func TestApplyUnhandledPolicy(t *testing.T) {
	tests := []struct {
		name        string
		policy      *saga.UnhandledPolicy
		wantOutcome saga.Outcome
		wantErr     error
	}{
		{"default is error", nil, 0, saga.ErrUnhandled},
		{"UnhandledError", new(saga.UnhandledError), 0, saga.ErrUnhandled},
		{"UnhandledIgnore", new(saga.UnhandledIgnore), saga.Ignored, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := saga.New[Order]("unhandled")
			open := m.State("Open")
			placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
			saga.NewEvent[OrderCancelled](m, func(e OrderCancelled) string { return e.OrderID })
			m.Initially(saga.When(placed).TransitionTo(open))
			m.During(open, saga.Ignore(placed))
			if tt.policy != nil {
				m.OnUnhandled(*tt.policy)
			}
			in := existing(open, []byte(`{}`), OrderCancelled{OrderID: "o-1"})
			res, err := m.Apply(in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Apply: got error %v, want %v", err, tt.wantErr)
			}
			if res.Outcome != tt.wantOutcome {
				t.Errorf("Outcome: got %v, want %v", res.Outcome, tt.wantOutcome)
			}
			if err != nil {
				for _, part := range []string{"unhandled", "saga_test.OrderCancelled", "Open"} {
					if !strings.Contains(err.Error(), part) {
						t.Errorf("error %q: want it to name %q", err, part)
					}
				}
				return
			}
			if res.From != open || res.To != open || res.Data != nil {
				t.Errorf("ignored result: got From %q, To %q, Data %s; want %q, %q, nil", res.From, res.To, res.Data, open, open)
			}
		})
	}
}

// stepMachine records, in Data.Steps and in calls, the steps that ran.
func stepMachine(calls *[]string, failAt string, panicAt string) (*saga.Machine[Order], saga.State) {
	m := saga.New[Order]("steps")
	open, done := m.State("Open"), m.Final("Done")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	step := func(name string) func(*saga.Context[Order], OrderPlaced) error {
		return func(c *saga.Context[Order], _ OrderPlaced) error {
			*calls = append(*calls, name)
			c.Data.Steps = append(c.Data.Steps, name)
			c.Send(ShipOrder{OrderID: name})
			c.Schedule("t-"+name, time.Minute, PaymentTimeout{})
			c.Log(slog.LevelInfo, name)
			if name == panicAt {
				panic("boom at " + name)
			}
			if name == failAt {
				return errBoom
			}
			return nil
		}
	}
	m.Initially(saga.When(placed).Then(step("a")).Then(step("b")).TransitionTo(open).Then(step("c")).TransitionTo(done).Then(step("d")))
	return m, done
}

var errBoom = errors.New("boom")

func TestApplyThenOrder(t *testing.T) {
	var calls []string
	m, done := stepMachine(&calls, "", "")
	res, err := m.Apply(newInput(OrderPlaced{OrderID: "o-1"}))
	if err != nil {
		t.Fatalf("Apply: got error %v, want nil", err)
	}
	want := []string{"a", "b", "c", "d"}
	if !slices.Equal(calls, want) {
		t.Errorf("steps ran: got %q, want %q", calls, want)
	}
	if got := decodeData[Order](t, res.Data).Steps; !slices.Equal(got, want) {
		t.Errorf("Data.Steps: got %q, want %q", got, want)
	}
	// The last TransitionTo wins.
	if res.To != done || !res.Finished {
		t.Errorf("To, Finished: got %q, %v; want %q, true", res.To, res.Finished, done)
	}
}

func TestApplyStepErrorStopsChain(t *testing.T) {
	tests := []struct {
		name      string
		failAt    string
		panicAt   string
		wantErr   []error
		wantCalls []string
	}{
		{"first step fails", "a", "", []error{errBoom}, []string{"a"}},
		{"middle step fails", "b", "", []error{errBoom}, []string{"a", "b"}},
		{"after a transition", "c", "", []error{errBoom}, []string{"a", "b", "c"}},
		{"last step fails", "d", "", []error{errBoom}, []string{"a", "b", "c", "d"}},
		{"step panics", "", "b", []error{saga.ErrPanic}, []string{"a", "b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var calls []string
			m, _ := stepMachine(&calls, tt.failAt, tt.panicAt)
			res, err := m.Apply(newInput(OrderPlaced{OrderID: "o-1"}))
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("Apply: got error %v, want it to wrap %v", err, want)
				}
			}
			if !slices.Equal(calls, tt.wantCalls) {
				t.Errorf("steps ran: got %q, want %q", calls, tt.wantCalls)
			}
			if !reflect.DeepEqual(res, saga.Result{}) {
				t.Errorf("Result: got %+v, want the zero Result (no partial effects)", res)
			}
		})
	}
}

func TestApplyPanic(t *testing.T) {
	m := saga.New[Order]("panicky")
	open := m.State("Open")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	payment := saga.NewEvent[PaymentReceived](m, func(e PaymentReceived) string { return e.OrderID })
	cancel := saga.NewEvent[OrderCancelled](m, func(e OrderCancelled) string { return e.OrderID })
	m.Initially(saga.When(placed).Then(func(c *saga.Context[Order], e OrderPlaced) error {
		c.Send(ShipOrder{})
		var steps []string
		_ = steps[e.Total] // index out of range for any Total
		return nil
	}).TransitionTo(open))
	m.During(open,
		saga.When(payment).If(func(*saga.Context[Order], PaymentReceived) bool { panic(errBoom) },
			func(b *saga.Activity[Order, PaymentReceived]) *saga.Activity[Order, PaymentReceived] { return b }),
		saga.When(cancel).Then(func(c *saga.Context[Order], _ OrderCancelled) error {
			c.Data = nil // the next access panics in the encoder or the handler
			c.Data.ID = "x"
			return nil
		}),
	)
	tests := []struct {
		name     string
		in       saga.Input
		wantText string
	}{
		{"runtime error in step", newInput(OrderPlaced{}), "index out of range"},
		{"panic in condition", existing(open, []byte(`{}`), PaymentReceived{}), "boom"},
		{"nil dereference", existing(open, []byte(`{}`), OrderCancelled{}), "nil pointer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := m.Apply(tt.in)
			if !errors.Is(err, saga.ErrPanic) {
				t.Fatalf("Apply: got error %v, want it to wrap ErrPanic", err)
			}
			if !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("Apply error %q: want it to contain %q", err, tt.wantText)
			}
			if !reflect.DeepEqual(res, saga.Result{}) {
				t.Errorf("Result: got %+v, want the zero Result", res)
			}
		})
	}
}

type branchAct = saga.Activity[Order, PaymentReceived]

func TestApplyBranches(t *testing.T) {
	m := saga.New[Order]("branches")
	awaiting := m.State("Awaiting")
	partial := m.State("Partial")
	paid := m.Final("Paid")
	overpaid := m.Final("Overpaid")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	payment := saga.NewEvent[PaymentReceived](m, func(e PaymentReceived) string { return e.OrderID })
	note := func(s string) func(*saga.Context[Order], PaymentReceived) error {
		return func(c *saga.Context[Order], _ PaymentReceived) error {
			c.Data.Steps = append(c.Data.Steps, s)
			return nil
		}
	}
	covered := func(c *saga.Context[Order], e PaymentReceived) bool { return c.Data.Paid+e.Amount >= c.Data.Total }
	exact := func(c *saga.Context[Order], e PaymentReceived) bool { return c.Data.Paid+e.Amount == c.Data.Total }
	large := func(_ *saga.Context[Order], e PaymentReceived) bool { return e.Amount >= 50 }
	m.Initially(saga.When(placed).Then(func(c *saga.Context[Order], e OrderPlaced) error {
		c.Data.Total = e.Total
		return nil
	}).TransitionTo(awaiting))
	behaviour := saga.When(payment).
		If(large, func(b *branchAct) *branchAct { return b.Then(note("large")) }).
		IfElse(covered,
			func(b *branchAct) *branchAct {
				return b.Then(note("covered")).IfElse(exact,
					func(b *branchAct) *branchAct { return b.Then(note("exact")).TransitionTo(paid) },
					func(b *branchAct) *branchAct { return b.Then(note("over")).TransitionTo(overpaid) })
			},
			func(b *branchAct) *branchAct { return b.Then(note("short")).TransitionTo(partial) }).
		Then(func(c *saga.Context[Order], e PaymentReceived) error {
			c.Data.Paid += e.Amount
			return nil
		})
	m.During(awaiting, saga.Ignore(placed), behaviour)
	m.During(partial, saga.Ignore(placed), saga.When(payment).
		If(covered, func(b *branchAct) *branchAct { return b.Then(note("settled")).TransitionTo(paid) }).
		Then(func(c *saga.Context[Order], e PaymentReceived) error {
			c.Data.Paid += e.Amount
			return nil
		}))
	if err := m.Validate(); err != nil {
		t.Fatalf("Validate: got %v, want nil", err)
	}

	tests := []struct {
		name      string
		state     saga.State
		paidSoFar int
		amount    int
		wantTo    saga.State
		wantSteps []string
	}{
		{"short", awaiting, 0, 10, partial, []string{"short"}},
		{"large but short", awaiting, 0, 60, partial, []string{"large", "short"}},
		{"exact", awaiting, 0, 100, paid, []string{"large", "covered", "exact"}},
		{"exact small", awaiting, 90, 10, paid, []string{"covered", "exact"}},
		{"over", awaiting, 90, 20, overpaid, []string{"covered", "over"}},
		{"if true", partial, 90, 10, paid, []string{"settled"}},
		{"if false stays", partial, 10, 10, partial, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := mustJSON(Order{ID: "o-1", Total: 100, Paid: tt.paidSoFar})
			res, err := m.Apply(existing(tt.state, data, PaymentReceived{OrderID: "o-1", Amount: tt.amount}))
			if err != nil {
				t.Fatalf("Apply: got error %v, want nil", err)
			}
			if res.Outcome != saga.Applied || res.To != tt.wantTo {
				t.Errorf("Outcome, To: got %v, %q; want applied, %q", res.Outcome, res.To, tt.wantTo)
			}
			if res.Finished != m.IsFinal(tt.wantTo) {
				t.Errorf("Finished: got %v, want %v", res.Finished, m.IsFinal(tt.wantTo))
			}
			got := decodeData[Order](t, res.Data)
			if !slices.Equal(got.Steps, tt.wantSteps) {
				t.Errorf("steps: got %q, want %q", got.Steps, tt.wantSteps)
			}
			if want := tt.paidSoFar + tt.amount; got.Paid != want {
				t.Errorf("Paid (the step after the branches): got %d, want %d", got.Paid, want)
			}
		})
	}
}

// TestApplyBranchError checks that an error inside a branch stops the outer
// chain too.
func TestApplyBranchError(t *testing.T) {
	m := saga.New[Order]("branch-error")
	open := m.State("Open")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	after := false
	m.Initially(saga.When(placed).
		If(func(*saga.Context[Order], OrderPlaced) bool { return true },
			func(b *saga.Activity[Order, OrderPlaced]) *saga.Activity[Order, OrderPlaced] {
				return b.TransitionTo(open).Then(func(*saga.Context[Order], OrderPlaced) error { return errBoom })
			}).
		Then(func(*saga.Context[Order], OrderPlaced) error { after = true; return nil }))
	res, err := m.Apply(newInput(OrderPlaced{OrderID: "o-1"}))
	if !errors.Is(err, errBoom) {
		t.Fatalf("Apply: got error %v, want it to wrap %v", err, errBoom)
	}
	if after {
		t.Error("step after the failing branch ran, want it skipped")
	}
	if !reflect.DeepEqual(res, saga.Result{}) {
		t.Errorf("Result: got %+v, want the zero Result", res)
	}
}

func TestApplyEffects(t *testing.T) {
	m := saga.New[Order]("effects")
	open := m.State("Open")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	m.Initially(saga.When(placed).Then(func(c *saga.Context[Order], e OrderPlaced) error {
		c.Send(ShipOrder{OrderID: "1"})
		c.Schedule("remind", time.Hour, PaymentTimeout{OrderID: "2"})
		c.Publish(&OrderPaid{OrderID: "3"})
		c.Schedule("expire", 0, namedByValue{ID: "4"})
		c.Log(slog.LevelWarn, "late", "order_id", e.OrderID, "n", 2)
		return nil
	}).Then(func(c *saga.Context[Order], e OrderPlaced) error {
		c.Publish(namedByValue{ID: "5"})
		c.Log(slog.LevelDebug, "second")
		return nil
	}).TransitionTo(open))

	res, err := m.Apply(newInput(OrderPlaced{OrderID: "o-1"}))
	if err != nil {
		t.Fatalf("Apply: got error %v, want nil", err)
	}
	wantEmitted := []saga.Emission{
		{Intent: saga.IntentSend, Type: "saga_test.ShipOrder", Msg: ShipOrder{OrderID: "1"}, Index: 0},
		{Intent: saga.IntentPublish, Type: "saga_test.OrderPaid", Msg: &OrderPaid{OrderID: "3"}, Index: 2},
		{Intent: saga.IntentPublish, Type: "orders.v1.Named", Msg: namedByValue{ID: "5"}, Index: 4},
	}
	if !reflect.DeepEqual(res.Emitted, wantEmitted) {
		t.Errorf("Emitted:\ngot  %+v\nwant %+v", res.Emitted, wantEmitted)
	}
	wantScheduled := []saga.Scheduled{
		{Name: "remind", DueAt: t0.Add(time.Hour), Type: "saga_test.PaymentTimeout", Msg: PaymentTimeout{OrderID: "2"}, Index: 1},
		{Name: "expire", DueAt: t0, Type: "orders.v1.Named", Msg: namedByValue{ID: "4"}, Index: 3},
	}
	if !reflect.DeepEqual(res.Scheduled, wantScheduled) {
		t.Errorf("Scheduled:\ngot  %+v\nwant %+v", res.Scheduled, wantScheduled)
	}
	if res.Unscheduled != nil {
		t.Errorf("Unscheduled: got %q, want nil", res.Unscheduled)
	}
	wantLogs := []saga.LogRecord{
		{Level: slog.LevelWarn, Msg: "late", Args: []any{"order_id", "o-1", "n", 2}},
		{Level: slog.LevelDebug, Msg: "second"},
	}
	if !reflect.DeepEqual(res.Logs, wantLogs) {
		t.Errorf("Logs:\ngot  %+v\nwant %+v", res.Logs, wantLogs)
	}
}

// TestApplyIndexStrictlyIncreasing checks that emissions and schedules share
// one index sequence: merged, they are strictly increasing, whatever the
// interleaving.
func TestApplyIndexStrictlyIncreasing(t *testing.T) {
	ops := []string{"send", "schedule", "publish", "schedule", "unschedule", "send", "publish", "schedule", "send"}
	m := saga.New[Order]("index")
	open := m.State("Open")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	m.Initially(saga.When(placed).Then(func(c *saga.Context[Order], _ OrderPlaced) error {
		for i, op := range ops {
			switch op {
			case "send":
				c.Send(ShipOrder{})
			case "publish":
				c.Publish(OrderPaid{})
			case "schedule":
				c.Schedule(string(rune('a'+i)), time.Duration(i)*time.Second, PaymentTimeout{})
			case "unschedule":
				c.Unschedule("d") // the schedule at i == 3
			}
		}
		return nil
	}).TransitionTo(open))
	res, err := m.Apply(newInput(OrderPlaced{OrderID: "o-1"}))
	if err != nil {
		t.Fatalf("Apply: got error %v, want nil", err)
	}
	var idx []int
	for _, e := range res.Emitted {
		idx = append(idx, e.Index)
	}
	for _, s := range res.Scheduled {
		idx = append(idx, s.Index)
	}
	slices.Sort(idx)
	// Index 3 belonged to the unscheduled timer "d": indices are never reused.
	want := []int{0, 1, 2, 4, 5, 6, 7}
	if !slices.Equal(idx, want) {
		t.Errorf("indices: got %v, want %v", idx, want)
	}
}

func TestApplyUnschedule(t *testing.T) {
	type op struct {
		unschedule bool
		name       string
	}
	tests := []struct {
		name            string
		ops             []op
		wantScheduled   []string
		wantUnscheduled []string
	}{
		{"unschedule earlier schedule", []op{{false, "a"}, {false, "b"}, {true, "a"}}, []string{"b"}, []string{"a"}},
		{"unschedule unknown name", []op{{false, "a"}, {true, "z"}}, []string{"a"}, []string{"z"}},
		{"unschedule then schedule again", []op{{false, "a"}, {true, "a"}, {false, "a"}}, []string{"a"}, []string{"a"}},
		{"unschedule removes every earlier schedule of the name", []op{{false, "a"}, {false, "a"}, {false, "b"}, {true, "a"}}, []string{"b"}, []string{"a"}},
		{"unschedule twice", []op{{true, "a"}, {true, "a"}}, nil, []string{"a", "a"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := saga.New[Order]("unschedule")
			open := m.State("Open")
			placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
			m.Initially(saga.When(placed).Then(func(c *saga.Context[Order], _ OrderPlaced) error {
				for _, o := range tt.ops {
					if o.unschedule {
						c.Unschedule(o.name)
					} else {
						c.Schedule(o.name, time.Minute, PaymentTimeout{})
					}
				}
				return nil
			}).TransitionTo(open))
			res, err := m.Apply(newInput(OrderPlaced{OrderID: "o-1"}))
			if err != nil {
				t.Fatalf("Apply: got error %v, want nil", err)
			}
			var names []string
			for _, s := range res.Scheduled {
				names = append(names, s.Name)
			}
			if !slices.Equal(names, tt.wantScheduled) {
				t.Errorf("Scheduled: got %q, want %q", names, tt.wantScheduled)
			}
			if !slices.Equal(res.Unscheduled, tt.wantUnscheduled) {
				t.Errorf("Unscheduled: got %q, want %q", res.Unscheduled, tt.wantUnscheduled)
			}
		})
	}
}

func TestContextAccessors(t *testing.T) {
	type seen struct {
		key, messageID string
		now            time.Time
		current        saga.State
	}
	var got seen
	m := saga.New[Order]("accessors")
	open := m.State("Open")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	look := func(c *saga.Context[Order], _ OrderPlaced) error {
		got = seen{c.Key(), c.MessageID(), c.Now(), c.Current()}
		return nil
	}
	m.Initially(saga.When(placed).Then(look).TransitionTo(open))
	// Current is the state on arrival, also after a TransitionTo.
	m.During(open, saga.When(placed).TransitionTo(open).Then(look))

	later := t0.Add(90 * time.Minute)
	tests := []struct {
		name string
		in   saga.Input
		want seen
	}{
		{"new saga", saga.Input{Msg: OrderPlaced{}, MsgType: "saga_test.OrderPlaced", Key: "k-1", MessageID: "m-1", Now: t0},
			seen{"k-1", "m-1", t0, saga.Initial}},
		{"existing saga", saga.Input{Exists: true, State: open, Data: []byte(`{}`), Msg: OrderPlaced{}, MsgType: "saga_test.OrderPlaced", Key: "k-2", MessageID: "m-2", Now: later},
			seen{"k-2", "m-2", later, open}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got = seen{}
			if _, err := m.Apply(tt.in); err != nil {
				t.Fatalf("Apply: got error %v, want nil", err)
			}
			if got != tt.want {
				t.Errorf("Context: got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestApplyFreshState checks that a new saga starts from the zero document
// and an existing one from its stored document, never from what an earlier
// Apply produced.
func TestApplyFreshState(t *testing.T) {
	f := newOrderFixture()
	first, err := f.m.Apply(existing(f.paid, f.paidData, f.refundMsg))
	if err != nil {
		t.Fatalf("first Apply: got error %v, want nil", err)
	}
	second, err := f.m.Apply(existing(f.paid, f.paidData, f.refundMsg))
	if err != nil {
		t.Fatalf("second Apply: got error %v, want nil", err)
	}
	if got := decodeData[Order](t, second.Data).Refunded; got != 40 {
		t.Errorf("Refunded after two Applies of the same input: got %d, want 40", got)
	}
	if !bytes.Equal(first.Data, second.Data) {
		t.Errorf("Data: first %s, second %s; want equal", first.Data, second.Data)
	}
	created, err := f.m.Apply(newInput(OrderPlaced{OrderID: "o-2"}))
	if err != nil {
		t.Fatalf("Apply: got error %v, want nil", err)
	}
	if got, want := decodeData[Order](t, created.Data), (Order{ID: "o-2"}); !reflect.DeepEqual(got, want) {
		t.Errorf("new saga Data: got %+v, want %+v", got, want)
	}
}

// purityMachine mutates everything it can reach in its document.
func purityMachine(withUpgrade bool) (*saga.Machine[Order], saga.State) {
	m := saga.New[Order]("purity")
	open := m.State("Open")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	mutate := func(c *saga.Context[Order], e OrderPlaced) error {
		c.Data.ID += "-changed"
		c.Data.Total++
		for i := range c.Data.Steps {
			c.Data.Steps[i] = "overwritten"
		}
		c.Data.Steps = append(c.Data.Steps, "added")
		c.Send(*c.Data)
		c.Schedule("t", time.Second, OrderPaid{OrderID: c.Data.ID})
		return nil
	}
	m.Initially(saga.When(placed).Then(mutate).TransitionTo(open))
	m.During(open, saga.When(placed).Then(mutate))
	if withUpgrade {
		m.Upgrade(1, func(old json.RawMessage) (json.RawMessage, error) {
			return bytes.Replace(old, []byte(`"id"`), []byte(`"id" `), 1), nil
		})
	}
	return m, open
}

func TestApplyDoesNotMutateInput(t *testing.T) {
	for _, withUpgrade := range []bool{false, true} {
		m, open := purityMachine(withUpgrade)
		data := []byte(`{"id":"o-1","total":5,"steps":["x","y"]}`)
		orig := bytes.Clone(data)
		in := existing(open, data, OrderPlaced{OrderID: "o-1"})
		res, err := m.Apply(in)
		if err != nil {
			t.Fatalf("upgrade %v: Apply: got error %v, want nil", withUpgrade, err)
		}
		if !bytes.Equal(data, orig) {
			t.Errorf("upgrade %v: Input.Data after Apply: got %s, want %s", withUpgrade, data, orig)
		}
		want := Order{ID: "o-1-changed", Total: 6, Steps: []string{"overwritten", "overwritten", "added"}}
		if got := decodeData[Order](t, res.Data); !reflect.DeepEqual(got, want) {
			t.Errorf("upgrade %v: Data: got %+v, want %+v", withUpgrade, got, want)
		}
	}
}

func TestApplyDeterministic(t *testing.T) {
	f := newOrderFixture()
	p, _ := purityMachine(true)
	tests := []struct {
		name  string
		apply func() (saga.Result, error)
	}{
		{"create", func() (saga.Result, error) { return f.m.Apply(newInput(f.placedMsg)) }},
		{"transition", func() (saga.Result, error) { return f.m.Apply(existing(f.awaiting, f.awaitingData, f.paymentMsg)) }},
		{"final handles", func() (saga.Result, error) { return f.m.Apply(existing(f.paid, f.paidData, f.refundMsg)) }},
		{"upgrade and mutate", func() (saga.Result, error) {
			return p.Apply(existing("Open", []byte(`{"id":"o-1","steps":["x"]}`), OrderPlaced{}))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, errA := tt.apply()
			b, errB := tt.apply()
			if errA != nil || errB != nil {
				t.Fatalf("Apply: got errors %v, %v; want nil", errA, errB)
			}
			ja, jb := mustJSON(a), mustJSON(b)
			if !bytes.Equal(ja, jb) {
				t.Errorf("two Applies of one input differ:\nfirst  %s\nsecond %s", ja, jb)
			}
			if !reflect.DeepEqual(a, b) {
				t.Errorf("two Applies of one input differ:\nfirst  %+v\nsecond %+v", a, b)
			}
		})
	}
}

// OrderV3 is the order document at schema version 3; version 1 named the
// total "amount", version 2 stored it in cents as "amount_cents".
type OrderV3 struct {
	ID         string `json:"id"`
	TotalCents int    `json:"total_cents"`
	Upgraded   []int  `json:"upgraded"`
	SeenInStep int    `json:"seen_in_step"`
}

func upgradeMachine() (*saga.Machine[OrderV3], saga.State) {
	m := saga.New[OrderV3]("upgrade")
	open := m.State("Open")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	m.Initially(saga.When(placed).TransitionTo(open))
	m.During(open, saga.When(placed).Then(func(c *saga.Context[OrderV3], _ OrderPlaced) error {
		c.Data.SeenInStep = c.Data.TotalCents
		return nil
	}))
	step := func(from int, fn func(doc map[string]any)) func(json.RawMessage) (json.RawMessage, error) {
		return func(old json.RawMessage) (json.RawMessage, error) {
			var doc map[string]any
			if err := json.Unmarshal(old, &doc); err != nil {
				return nil, err
			}
			fn(doc)
			up, _ := doc["upgraded"].([]any)
			doc["upgraded"] = append(up, from)
			return json.Marshal(doc)
		}
	}
	// Registered out of order on purpose.
	m.Upgrade(2, step(2, func(doc map[string]any) {
		doc["total_cents"] = doc["amount_cents"]
		delete(doc, "amount_cents")
	}))
	m.Upgrade(1, step(1, func(doc map[string]any) {
		doc["amount_cents"] = doc["amount"].(float64) * 100
		delete(doc, "amount")
	}))
	return m, open
}

func TestApplyUpgrade(t *testing.T) {
	m, open := upgradeMachine()
	if got, want := m.SchemaVersion(), 3; got != want {
		t.Fatalf("SchemaVersion: got %d, want %d", got, want)
	}
	tests := []struct {
		name    string
		version int
		data    string
		want    OrderV3
	}{
		{"from version 1", 1, `{"id":"o-1","amount":7}`, OrderV3{ID: "o-1", TotalCents: 700, Upgraded: []int{1, 2}, SeenInStep: 700}},
		{"version 0 means 1", 0, `{"id":"o-1","amount":7}`, OrderV3{ID: "o-1", TotalCents: 700, Upgraded: []int{1, 2}, SeenInStep: 700}},
		{"from version 2", 2, `{"id":"o-1","amount_cents":5}`, OrderV3{ID: "o-1", TotalCents: 5, Upgraded: []int{2}, SeenInStep: 5}},
		{"current version", 3, `{"id":"o-1","total_cents":9}`, OrderV3{ID: "o-1", TotalCents: 9, SeenInStep: 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := existing(open, []byte(tt.data), OrderPlaced{OrderID: "o-1"})
			in.SchemaVersion = tt.version
			res, err := m.Apply(in)
			if err != nil {
				t.Fatalf("Apply: got error %v, want nil", err)
			}
			if got := decodeData[OrderV3](t, res.Data); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Data: got %+v, want %+v", got, tt.want)
			}
			if res.SchemaVersion != 3 {
				t.Errorf("SchemaVersion: got %d, want 3", res.SchemaVersion)
			}
		})
	}
	res, err := m.Apply(newInput(OrderPlaced{OrderID: "o-1"}))
	if err != nil {
		t.Fatalf("Apply to a new saga: got error %v, want nil", err)
	}
	if res.SchemaVersion != 3 {
		t.Errorf("new saga SchemaVersion: got %d, want 3", res.SchemaVersion)
	}
}

func TestApplyUpgradeErrors(t *testing.T) {
	errUp := errors.New("cannot upgrade")
	noop := func(old json.RawMessage) (json.RawMessage, error) { return old, nil }
	tests := []struct {
		name     string
		upgrades map[int]func(json.RawMessage) (json.RawMessage, error)
		stored   int
		data     string
		wantErr  []error
		wantText string
	}{
		{"missing step", map[int]func(json.RawMessage) (json.RawMessage, error){1: noop, 3: noop}, 1, `{}`,
			[]error{saga.ErrSchema}, "no upgrade from version 2"},
		{"stored newer than machine", map[int]func(json.RawMessage) (json.RawMessage, error){1: noop}, 3, `{}`,
			[]error{saga.ErrSchema}, "stored version 3 is newer than the machine's 2"},
		{"stored newer, no upgrades", nil, 2, `{}`,
			[]error{saga.ErrSchema}, "stored version 2 is newer than the machine's 1"},
		{"upgrade fails", map[int]func(json.RawMessage) (json.RawMessage, error){
			1: noop,
			2: func(json.RawMessage) (json.RawMessage, error) { return nil, errUp },
		}, 1, `{}`, []error{saga.ErrSchema, errUp}, "upgrade from version 2"},
		{"upgrade returns garbage", map[int]func(json.RawMessage) (json.RawMessage, error){
			1: func(json.RawMessage) (json.RawMessage, error) { return json.RawMessage(`{"id":`), nil },
		}, 1, `{}`, []error{saga.ErrSchema}, "decode"},
		{"stored document does not fit", nil, 1, `{"id":42}`, []error{saga.ErrSchema}, "decode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := saga.New[Order]("schema")
			open := m.State("Open")
			placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
			ran := false
			m.Initially(saga.When(placed).TransitionTo(open))
			m.During(open, saga.When(placed).Then(func(*saga.Context[Order], OrderPlaced) error { ran = true; return nil }))
			for from, fn := range tt.upgrades {
				m.Upgrade(from, fn)
			}
			in := existing(open, []byte(tt.data), OrderPlaced{OrderID: "o-1"})
			in.SchemaVersion = tt.stored
			res, err := m.Apply(in)
			for _, want := range tt.wantErr {
				if !errors.Is(err, want) {
					t.Errorf("Apply: got error %v, want it to wrap %v", err, want)
				}
			}
			if err != nil && !strings.Contains(err.Error(), tt.wantText) {
				t.Errorf("Apply error %q: want it to contain %q", err, tt.wantText)
			}
			if err != nil && !strings.Contains(err.Error(), "schema/o-1") {
				t.Errorf("Apply error %q: want it to name the saga %q", err, "schema/o-1")
			}
			if ran {
				t.Error("handler ran on a document that could not be loaded")
			}
			if !reflect.DeepEqual(res, saga.Result{}) {
				t.Errorf("Result: got %+v, want the zero Result", res)
			}
		})
	}
}

// TestApplyUpgradePanics checks that a panicking upgrade function fails the
// message like a panicking handler instead of crashing the caller.
func TestApplyUpgradePanics(t *testing.T) {
	m := saga.New[Order]("upgrade-panic")
	open := m.State("Open")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	m.Initially(saga.When(placed).TransitionTo(open))
	m.During(open, saga.When(placed))
	m.Upgrade(1, func(old json.RawMessage) (json.RawMessage, error) {
		var fields []string
		return json.RawMessage(fields[len(old)]), nil
	})
	var (
		res saga.Result
		err error
	)
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("Apply panicked: %v", p)
			}
		}()
		res, err = m.Apply(existing(open, []byte(`{}`), OrderPlaced{OrderID: "o-1"}))
	}()
	if !errors.Is(err, saga.ErrPanic) {
		t.Errorf("Apply: got error %v, want it to wrap ErrPanic", err)
	}
	if !reflect.DeepEqual(res, saga.Result{}) {
		t.Errorf("Result: got %+v, want the zero Result", res)
	}
}

// TestApplyConditionalIgnore checks Activity.Ignore: in a branch, it ignores
// the message (outcome Ignored, no state change, no emission) and discards
// what earlier steps did; otherwise the chain runs as usual.
func TestApplyConditionalIgnore(t *testing.T) {
	m := saga.New[Order]("conditional-ignore")
	awaiting := m.State("Awaiting")
	paid := m.Final("Paid")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	payment := saga.NewEvent[PaymentReceived](m, func(e PaymentReceived) string { return e.OrderID })
	m.Initially(saga.When(placed).Then(func(c *saga.Context[Order], e OrderPlaced) error {
		c.Data.Total = e.Total
		return nil
	}).TransitionTo(awaiting))
	zero := func(_ *saga.Context[Order], e PaymentReceived) bool { return e.Amount == 0 }
	m.During(awaiting, saga.Ignore(placed), saga.When(payment).
		Then(func(c *saga.Context[Order], e PaymentReceived) error {
			c.Data.Steps = append(c.Data.Steps, "seen")
			c.Publish(OrderPaid{OrderID: e.OrderID})
			return nil
		}).
		If(zero, func(b *branchAct) *branchAct { return b.Ignore() }).
		Then(func(c *saga.Context[Order], e PaymentReceived) error {
			c.Data.Paid += e.Amount
			return nil
		}).TransitionTo(paid))
	if err := m.Validate(); err != nil {
		t.Fatalf("Validate: got %v, want nil", err)
	}
	data := mustJSON(Order{ID: "o-1", Total: 100})

	res, err := m.Apply(existing(awaiting, data, PaymentReceived{OrderID: "o-1", Amount: 0}))
	if err != nil {
		t.Fatalf("Apply(zero payment): got error %v, want nil", err)
	}
	if res.Outcome != saga.Ignored || res.To != awaiting || res.Data != nil || len(res.Emitted) != 0 {
		t.Errorf("zero payment: got outcome %v, to %q, data %s, %d emitted; want ignored in Awaiting with nothing written or emitted",
			res.Outcome, res.To, res.Data, len(res.Emitted))
	}

	res, err = m.Apply(existing(awaiting, data, PaymentReceived{OrderID: "o-1", Amount: 100}))
	if err != nil {
		t.Fatalf("Apply(payment): got error %v, want nil", err)
	}
	if res.Outcome != saga.Applied || res.To != paid || len(res.Emitted) != 1 {
		t.Errorf("payment: got outcome %v, to %q, %d emitted; want applied, Paid, 1", res.Outcome, res.To, len(res.Emitted))
	}
	if got := decodeData[Order](t, res.Data); got.Paid != 100 || !slices.Equal(got.Steps, []string{"seen"}) {
		t.Errorf("payment: state %+v, want Paid 100 and steps [seen]", got)
	}
}

// A saga in a state the machine does not declare, or whose document is at
// a newer schema version, was written by another definition: Apply
// refuses it with ErrUnknownState (and ErrSchema for the version), before
// any handler or upgrade runs, whatever the unhandled policy.
func TestApplyUnknownState(t *testing.T) {
	for _, ignore := range []bool{false, true} {
		f := newOrderFixture()
		if ignore {
			f.m.OnUnhandled(saga.UnhandledIgnore)
		}
		in := existing("Reviewing", f.awaitingData, f.paymentMsg)
		if _, err := f.m.Apply(in); !errors.Is(err, saga.ErrUnknownState) || errors.Is(err, saga.ErrSchema) || !strings.Contains(err.Error(), `"Reviewing"`) {
			t.Errorf("unhandled ignored %v: a saga in an undeclared state: %v; want ErrUnknownState naming it", ignore, err)
		}
		newer := existing(f.awaiting, f.awaitingData, f.paymentMsg)
		newer.SchemaVersion = f.m.SchemaVersion() + 1
		if _, err := f.m.Apply(newer); !errors.Is(err, saga.ErrUnknownState) || !errors.Is(err, saga.ErrSchema) {
			t.Errorf("unhandled ignored %v: a newer schema version: %v; want ErrUnknownState and ErrSchema", ignore, err)
		}
		ended := existing(saga.Ended, f.awaitingData, f.paymentMsg)
		if res, err := f.m.Apply(ended); err != nil || res.Outcome != saga.Ignored {
			t.Errorf("unhandled ignored %v: an ended saga: %+v, %v; want it ignored", ignore, res, err)
		}
	}
}

// A declared migration moves a saga stored in a removed state into a kept
// one before the event applies, and reports it; an event the new state
// ignores still persists the migration, changing nothing else. A renamed
// message type decodes and applies as its new event.
func TestApplyMigrations(t *testing.T) {
	f := newOrderFixture()
	f.m.MigrateState("Reviewing", f.awaiting)
	res, err := f.m.Apply(existing("Reviewing", f.awaitingData, f.paymentMsg))
	if err != nil || res.Outcome != saga.Applied || res.MigratedFrom != "Reviewing" || res.From != f.awaiting || res.To != f.paid {
		t.Fatalf("payment for a saga stored in a migrated state: %+v, %v; want applied from AwaitingPayment, migrated from Reviewing", res, err)
	}
	res, err = f.m.Apply(existing("Reviewing", f.awaitingData, f.placedMsg)) // AwaitingPayment ignores it
	if err != nil || res.Outcome != saga.Applied || res.MigratedFrom != "Reviewing" || res.From != f.awaiting || res.To != f.awaiting || !bytes.Equal(res.Data, f.awaitingData) {
		t.Errorf("an ignored event for a migrated saga: %+v, %v; want the migration persisted, data unchanged", res, err)
	}
	if res, err := f.m.Apply(existing(f.awaiting, f.awaitingData, f.placedMsg)); err != nil || res.Outcome != saga.Ignored || res.MigratedFrom != "" {
		t.Errorf("an ignored event without a migration: %+v, %v; want ignored", res, err)
	}
	d := f.m.Describe()
	if len(d.Migrations) != 1 || d.Migrations[0] != (saga.MigrationDescription{Kind: saga.MigrateStateKind, From: "Reviewing", To: string(f.awaiting)}) {
		t.Errorf("description's migrations: %+v", d.Migrations)
	}
	for _, bad := range []func(){
		func() { f.m.MigrateState(string(f.awaiting), f.paid) },     // still declared
		func() { f.m.MigrateState("Gone", "Nowhere") },              // target not declared
		func() { f.m.MigrateState("Reviewing", f.paid) },            // twice
		func() { f.m.RenameMessage(f.paymentType, f.paymentType) },  // an event already
		func() { f.m.RenameMessage("old.Payment", "nothing.Such") }, // target not an event
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("a bad migration declaration did not panic")
				}
			}()
			bad()
		}()
	}
	f.m.RenameMessage("old.Payment", f.paymentType)
	if !slices.Contains(f.m.MessageTypes(), "old.Payment") {
		t.Errorf("MessageTypes %v lack the renamed type", f.m.MessageTypes())
	}
	body, _ := json.Marshal(f.paymentMsg)
	msg, key, err := f.m.Decode("old.Payment", body)
	if err != nil || key != "o-1" {
		t.Fatalf("decode a renamed type: %v, %q, %v", msg, key, err)
	}
	in := existing(f.awaiting, f.awaitingData, msg)
	in.MsgType = "old.Payment"
	if res, err := f.m.Apply(in); err != nil || res.To != f.paid {
		t.Errorf("apply a renamed type: %+v, %v; want it applied as the payment", res, err)
	}
}

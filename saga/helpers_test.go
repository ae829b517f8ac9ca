package saga_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/saga"
)

// t0 is the clock reading of every Input built by the helpers.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// Order is the state document of the order fixture.
type Order struct {
	ID       string   `json:"id"`
	Total    int      `json:"total"`
	Paid     int      `json:"paid,omitempty"`
	Refunded int      `json:"refunded,omitempty"`
	Steps    []string `json:"steps,omitempty"`
}

type OrderPlaced struct {
	OrderID string `json:"order_id"`
	Total   int    `json:"total"`
}

type PaymentReceived struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

type OrderCancelled struct {
	OrderID string `json:"order_id"`
}

type RefundRequested struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

// Emitted by the order fixture.
type (
	ShipOrder      struct{ OrderID string }
	OrderPaid      struct{ OrderID string }
	PaymentTimeout struct{ OrderID string }
	IssueRefund    struct{ OrderID string }
)

const paymentTimeout = 30 * time.Minute

// orderFixture is a complete machine (Validate returns nil):
//
//	Initial --OrderPlaced--> AwaitingPayment --PaymentReceived--> Paid (final)
//	                                         --OrderCancelled--> Cancelled (final)
//
// Paid handles RefundRequested explicitly; Cancelled handles nothing.
type orderFixture struct {
	m                          *saga.Machine[Order]
	awaiting, paid, cancelled  saga.State
	placed                     *saga.Event[Order, OrderPlaced]
	payment                    *saga.Event[Order, PaymentReceived]
	cancel                     *saga.Event[Order, OrderCancelled]
	refund                     *saga.Event[Order, RefundRequested]
	paymentType                string
	placedMsg, paymentMsg      any
	cancelMsg, refundMsg       any
	awaitingData, paidData     []byte
	awaitingOrder, placedOrder Order
}

func newOrderFixture() *orderFixture {
	m := saga.New[Order]("order")
	f := &orderFixture{
		m:         m,
		awaiting:  m.State("AwaitingPayment"),
		paid:      m.Final("Paid"),
		cancelled: m.Final("Cancelled"),
	}
	f.placed = saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	f.payment = saga.NewEvent[PaymentReceived](m, func(e PaymentReceived) string { return e.OrderID })
	f.cancel = saga.NewEvent[OrderCancelled](m, func(e OrderCancelled) string { return e.OrderID })
	f.refund = saga.NewEvent[RefundRequested](m, func(e RefundRequested) string { return e.OrderID })
	f.paymentType = f.payment.Name()

	m.Initially(saga.When(f.placed).Then(func(c *saga.Context[Order], e OrderPlaced) error {
		c.Data.ID, c.Data.Total = e.OrderID, e.Total
		c.Schedule("payment-timeout", paymentTimeout, PaymentTimeout{OrderID: e.OrderID})
		return nil
	}).TransitionTo(f.awaiting))
	m.During(f.awaiting,
		saga.Ignore(f.placed),
		saga.When(f.payment).Then(func(c *saga.Context[Order], e PaymentReceived) error {
			c.Data.Paid += e.Amount
			c.Unschedule("payment-timeout")
			c.Send(ShipOrder{OrderID: c.Data.ID})
			c.Publish(OrderPaid{OrderID: c.Data.ID})
			return nil
		}).TransitionTo(f.paid),
		saga.When(f.cancel).TransitionTo(f.cancelled),
		saga.Ignore(f.refund),
	)
	m.During(f.paid, saga.When(f.refund).Then(func(c *saga.Context[Order], e RefundRequested) error {
		c.Data.Refunded += e.Amount
		c.Send(IssueRefund{OrderID: c.Data.ID})
		return nil
	}))

	f.placedMsg = OrderPlaced{OrderID: "o-1", Total: 100}
	f.paymentMsg = PaymentReceived{OrderID: "o-1", Amount: 100}
	f.cancelMsg = OrderCancelled{OrderID: "o-1"}
	f.refundMsg = RefundRequested{OrderID: "o-1", Amount: 40}
	f.placedOrder = Order{ID: "o-1", Total: 100}
	f.awaitingOrder = f.placedOrder
	f.awaitingData = mustJSON(f.awaitingOrder)
	f.paidData = mustJSON(Order{ID: "o-1", Total: 100, Paid: 100})
	return f
}

// newInput returns an Input for a saga that does not exist yet.
func newInput(msg any) saga.Input {
	return saga.Input{Msg: msg, MsgType: saga.MessageType(msg), Key: "o-1", MessageID: "m-1", Now: t0}
}

// existing returns an Input for a stored saga in state s with document data.
func existing(s saga.State, data []byte, msg any) saga.Input {
	in := newInput(msg)
	in.Exists, in.State, in.Data, in.SchemaVersion = true, s, data, 1
	return in
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// decodeData decodes a Result's document.
func decodeData[S any](t *testing.T, data []byte) S {
	t.Helper()
	var s S
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatalf("decode result data %q: %v", data, err)
	}
	return s
}

// mustPanic runs fn and returns what it panicked with as a string; it fails
// the test when fn returns normally.
func mustPanic(t *testing.T, fn func()) (msg string) {
	t.Helper()
	defer func() {
		p := recover()
		if p == nil {
			t.Fatal("got no panic, want one")
		}
		msg = fmt.Sprint(p)
	}()
	fn()
	return ""
}

// problems flattens the error returned by Validate into its *Problem values,
// in order.
func problems(t *testing.T, err error) []saga.Problem {
	t.Helper()
	if err == nil {
		return nil
	}
	joined, ok := err.(interface{ Unwrap() []error })
	if !ok {
		t.Fatalf("Validate error %T is not a join", err)
	}
	var out []saga.Problem
	for _, e := range joined.Unwrap() {
		var p *saga.Problem
		if !errors.As(e, &p) {
			t.Fatalf("Validate joined %T (%v), want *saga.Problem", e, e)
		}
		out = append(out, *p)
	}
	return out
}

func errText(err error) string {
	if err == nil {
		return "<nil>"
	}
	return strings.ReplaceAll(err.Error(), "\n", " | ")
}

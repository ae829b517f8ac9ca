// Package orders is the 30-line saga of the README, kept here so that the
// README's code compiles and is tested. idem serve and idem demo --serve
// register it (message types orders.OrderPlaced, ...): the idem binary
// imports this package, so what a user reads here is what they run.
package orders

import (
	"time"

	"github.com/idemhq/idem/saga"
)

// Order is the saga's state document.
type Order struct{ Items, Paid int }

// OrderPlaced starts an order saga.
type OrderPlaced struct {
	OrderID string
	Items   int
}

// PaymentReceived pays for an order.
type PaymentReceived struct {
	OrderID string
	Amount  int
}

// ShipOrder is the command the saga sends once the order is paid.
type ShipOrder struct{ OrderID string }

// PaymentOverdue is the timer that cancels an unpaid order.
type PaymentOverdue struct{ OrderID string }

// OrderMachine builds the order saga.
func OrderMachine() *saga.Machine[Order] {
	m := saga.New[Order]("order")
	awaiting, shipped, cancelled := m.State("AwaitingPayment"), m.Final("Shipped"), m.Final("Cancelled")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	paid := saga.NewEvent[PaymentReceived](m, func(e PaymentReceived) string { return e.OrderID })
	overdue := saga.NewEvent[PaymentOverdue](m, func(e PaymentOverdue) string { return e.OrderID })

	m.Initially(saga.When(placed).Then(func(c *saga.Context[Order], e OrderPlaced) error {
		c.Data.Items = e.Items
		c.Schedule("overdue", 24*time.Hour, PaymentOverdue{OrderID: e.OrderID})
		return nil
	}).TransitionTo(awaiting))
	m.During(awaiting,
		saga.Ignore(placed),
		saga.When(paid).Then(func(c *saga.Context[Order], e PaymentReceived) error {
			c.Data.Paid = e.Amount
			c.Unschedule("overdue")
			c.Send(ShipOrder{OrderID: c.Key()}) // buffered; leaves after the commit
			return nil
		}).TransitionTo(shipped),
		saga.When(overdue).TransitionTo(cancelled))
	return m
}

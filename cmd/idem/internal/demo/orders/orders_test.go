package orders_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/demo/orders"
	"github.com/idemhq/idem/sagatest"
)

func TestPaidOrderShipsOnce(t *testing.T) {
	h := sagatest.New(t, orders.OrderMachine(), &sagatest.Options{Copies: 3, Replicas: 2})
	h.Deliver("placed-1", orders.OrderPlaced{OrderID: "42", Items: 3})
	h.Settle()
	h.Deliver("paid-1", orders.PaymentReceived{OrderID: "42", Amount: 30})
	h.Settle()
	h.AssertState("42", "Shipped")
	h.AssertEmittedCount("orders.ShipOrder", 1)
	h.Advance(48 * time.Hour) // the overdue timer was unscheduled
	h.AssertState("42", "Shipped")
}

func TestUnpaidOrderIsCancelledByItsTimer(t *testing.T) {
	h := sagatest.New(t, orders.OrderMachine(), nil)
	h.Deliver("placed-1", orders.OrderPlaced{OrderID: "42", Items: 3})
	h.Settle()
	h.Advance(25 * time.Hour)
	h.AssertState("42", "Cancelled")
	h.AssertEmittedCount("orders.ShipOrder", 0)
}

func TestMachineIsComplete(t *testing.T) {
	if err := orders.OrderMachine().Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
}

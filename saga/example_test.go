package saga_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/saga"
)

// The engine decodes each delivery, loads the saga, calls Apply and commits
// the Result; this example plays the engine by hand.
func ExampleNew() {
	type Order struct {
		ID   string `json:"id"`
		Paid int    `json:"paid"`
	}
	type OrderPlaced struct{ OrderID string }
	type PaymentReceived struct {
		OrderID string
		Amount  int
	}
	type ShipOrder struct{ OrderID string }
	type OrderPaid struct{ OrderID string }

	m := saga.New[Order]("order")
	awaiting, paid := m.State("AwaitingPayment"), m.Final("Paid")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	payment := saga.NewEvent[PaymentReceived](m, func(e PaymentReceived) string { return e.OrderID })
	m.Initially(saga.When(placed).Then(func(c *saga.Context[Order], e OrderPlaced) error {
		c.Data.ID = e.OrderID
		return nil
	}).TransitionTo(awaiting))
	m.During(awaiting,
		saga.Ignore(placed),
		saga.When(payment).Then(func(c *saga.Context[Order], e PaymentReceived) error {
			c.Data.Paid += e.Amount
			c.Send(ShipOrder{OrderID: c.Data.ID})
			c.Publish(OrderPaid{OrderID: c.Data.ID})
			return nil
		}).TransitionTo(paid),
	)

	// The stored saga: none yet.
	var stored *saga.Result
	deliveries := []struct{ msgType, body string }{
		{"saga_test.OrderPlaced", `{"OrderID":"o-1"}`},
		{"saga_test.PaymentReceived", `{"OrderID":"o-1","Amount":250}`},
	}
	for i, d := range deliveries {
		msg, key, err := m.Decode(d.msgType, []byte(d.body))
		if err != nil {
			fmt.Println(err)
			return
		}
		in := saga.Input{
			Msg: msg, MsgType: d.msgType, Key: key,
			MessageID: fmt.Sprintf("m-%d", i+1),
			Now:       time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC),
		}
		if stored != nil {
			in.Exists, in.State, in.Data, in.SchemaVersion = true, stored.To, stored.Data, stored.SchemaVersion
		}
		res, err := m.Apply(in)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%s: %s -> %s (%s, finished %v)\n", key, res.From, res.To, res.Outcome, res.Finished)
		for _, e := range res.Emitted {
			fmt.Printf("  %s %s #%d\n", e.Intent, e.Type, e.Index)
		}
		stored = &res
	}
	fmt.Printf("state %s\n", stored.Data)
	// Output:
	// o-1: Initial -> AwaitingPayment (applied, finished false)
	// o-1: AwaitingPayment -> Paid (applied, finished true)
	//   send saga_test.ShipOrder #0
	//   publish saga_test.OrderPaid #1
	// state {"id":"o-1","paid":250}
}

func ExampleMachine_Mermaid() {
	type Ticket struct{}
	type Opened struct{ ID string }
	type Resolved struct{ ID string }

	m := saga.New[Ticket]("ticket")
	open, done := m.State("Open"), m.Final("Resolved")
	opened := saga.NewEvent[Opened](m, func(e Opened) string { return e.ID })
	resolved := saga.NewEvent[Resolved](m, func(e Resolved) string { return e.ID })
	m.Initially(saga.When(opened).TransitionTo(open))
	m.During(open, saga.When(opened), saga.When(resolved).TransitionTo(done))

	fmt.Print(m.Mermaid())
	// Output:
	// stateDiagram-v2
	//     [*] --> Open: Opened
	//     Open --> Open: Opened
	//     Open --> Resolved: Resolved
	//     Resolved --> [*]
}

func ExampleMachine_Validate() {
	type Order struct{}
	type OrderPlaced struct{ OrderID string }
	type PaymentReceived struct{ OrderID string }
	type OrderCancelled struct{ OrderID string }

	m := saga.New[Order]("order")
	awaiting, paid, cancelled := m.State("AwaitingPayment"), m.Final("Paid"), m.Final("Cancelled")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.OrderID })
	payment := saga.NewEvent[PaymentReceived](m, func(e PaymentReceived) string { return e.OrderID })
	cancel := saga.NewEvent[OrderCancelled](m, func(e OrderCancelled) string { return e.OrderID })
	m.Initially(saga.When(placed).TransitionTo(awaiting))
	m.During(awaiting, saga.When(payment).TransitionTo(paid))

	err := m.Validate()
	fmt.Println(err)
	var p *saga.Problem
	if errors.As(err, &p) {
		fmt.Printf("first: kind=%s state=%s event=%s\n", p.Kind, p.State, p.Event)
	}

	// Complete the machine: a duplicate OrderPlaced is ignored and the
	// order can be cancelled while it awaits payment.
	m.During(awaiting, saga.Ignore(placed), saga.When(cancel).TransitionTo(cancelled))
	fmt.Println(m.Validate())
	// Output:
	// state AwaitingPayment neither handles nor ignores event saga_test.OrderPlaced
	// state AwaitingPayment neither handles nor ignores event saga_test.OrderCancelled
	// state Cancelled is unreachable
	// event saga_test.OrderCancelled can never start or reach a saga
	// first: kind=unhandled state=AwaitingPayment event=saga_test.OrderPlaced
	// <nil>
}

// A machine declares searchable attributes of its state; the engine stores
// their values with each instance, and operations tools search them
// (idem sagas ls --attr supplier=Müller).
func ExampleMachine_Attribute() {
	type PurchaseOrder struct {
		Supplier string `json:"supplier"`
	}
	type OrderPlaced struct{ ID, Supplier string }

	m := saga.New[PurchaseOrder]("purchase-order")
	open := m.State("Open")
	placed := saga.NewEvent[OrderPlaced](m, func(e OrderPlaced) string { return e.ID })
	m.Initially(saga.When(placed).Then(func(c *saga.Context[PurchaseOrder], e OrderPlaced) error {
		c.Data.Supplier = e.Supplier
		return nil
	}).TransitionTo(open))
	m.Attribute("supplier", func(po PurchaseOrder) string { return po.Supplier })

	res, err := m.Apply(saga.Input{
		Msg: OrderPlaced{ID: "po-1", Supplier: "Mu\u0308ller"}, MsgType: "saga_test.OrderPlaced",
		Key: "po-1", MessageID: "m-1", Now: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%q NFC: %v\n", res.Attributes["supplier"], res.Attributes["supplier"] == "M\u00fcller")
	// Output: "Müller" NFC: true
}

// Describe lists everything the machine declares; Fingerprint identifies
// the definition. Declaring the same things in another order keeps the
// fingerprint, and any change to what a machine does changes it.
func ExampleMachine_Describe() {
	type Ticket struct{ ID string }
	type Opened struct{ ID string }
	type Resolved struct{ ID string }

	build := func(reorder, reopenable bool) *saga.Machine[Ticket] {
		m := saga.New[Ticket]("ticket")
		var open, done saga.State
		if reorder {
			done, open = m.Final("Resolved"), m.State("Open")
		} else {
			open, done = m.State("Open"), m.Final("Resolved")
		}
		opened := saga.NewEvent[Opened](m, func(e Opened) string { return e.ID })
		resolved := saga.NewEvent[Resolved](m, func(e Resolved) string { return e.ID })
		m.Initially(saga.When(opened).TransitionTo(open))
		m.During(open, saga.Ignore(opened), saga.When(resolved).TransitionTo(done))
		if reopenable {
			m.During(done, saga.When(opened).TransitionTo(open))
		}
		m.Attribute("id", func(t Ticket) string { return t.ID })
		return m
	}

	d := build(false, false).Describe()
	fmt.Println("schema version", d.SchemaVersion, "unhandled:", d.Unhandled, "attributes:", d.Attributes)
	for _, s := range d.States {
		fmt.Printf("state %s final=%v ignores=%v\n", s.Name, s.Final, s.Ignores)
	}
	for _, e := range d.Events {
		fmt.Printf("event %s handled in %v\n", e.Type, e.HandledIn)
	}
	for _, t := range d.Transitions {
		fmt.Printf("%s -> %s on %s\n", t.From, t.To, t.Event)
	}
	fmt.Println("reordered, same fingerprint:", build(true, false).Describe().Fingerprint() == d.Fingerprint())
	fmt.Println("reopenable, same fingerprint:", build(false, true).Describe().Fingerprint() == d.Fingerprint())
	// Output:
	// schema version 1 unhandled: error attributes: [id]
	// state Open final=false ignores=[saga_test.Opened]
	// state Resolved final=true ignores=[]
	// event saga_test.Opened handled in [Initial]
	// event saga_test.Resolved handled in [Open]
	// Initial -> Open on saga_test.Opened
	// Open -> Resolved on saga_test.Resolved
	// reordered, same fingerprint: true
	// reopenable, same fingerprint: false
}

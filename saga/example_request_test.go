package saga_test

import (
	"fmt"
	"time"

	"github.com/idemhq/idem/saga"
)

// A saga asks another service for a credit check and waits at most a
// minute. The engine derives the request's ID from its timeout timer, so
// the stored saga remembers which request is pending; this example plays
// the engine by hand.
func ExampleNewRequest() {
	type Loan struct{ Decision string }
	type Apply struct{ LoanID string }
	type CheckCredit struct{ LoanID string }
	type CreditChecked struct {
		LoanID string
		OK     bool
	}

	m := saga.New[Loan]("loan")
	checking, decided := m.State("Checking"), m.Final("Decided")
	apply := saga.NewEvent(m, func(a Apply) string { return a.LoanID })
	check := saga.NewRequest[CheckCredit](m, "credit", func(r CreditChecked) string { return r.LoanID })
	m.Initially(saga.When(apply).Then(func(c *saga.Context[Loan], a Apply) error {
		check.Send(c, CheckCredit(a), time.Minute)
		return nil
	}).TransitionTo(checking))
	m.During(checking,
		saga.Ignore(apply),
		saga.When(check.Completed).Then(func(c *saga.Context[Loan], r CreditChecked) error {
			c.Data.Decision = fmt.Sprint("credit ok: ", r.OK)
			return nil
		}).TransitionTo(decided),
		saga.When(check.TimeoutExpired).Then(func(c *saga.Context[Loan], _ saga.Timeout[CheckCredit]) error {
			c.Data.Decision = "no answer"
			return nil
		}).TransitionTo(decided),
		saga.When(check.Faulted).Then(func(c *saga.Context[Loan], f saga.Fault[CheckCredit]) error {
			c.Data.Decision = "refused: " + f.Reason
			return nil
		}).TransitionTo(decided),
	)
	fmt.Println("valid:", m.Validate() == nil)

	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	res, _ := m.Apply(saga.Input{Msg: Apply{LoanID: "l-1"}, MsgType: apply.Name(), Key: "l-1", MessageID: "m-1", Now: now})
	fmt.Println("sent", res.Emitted[0].Type, "with timeout", res.Scheduled[0].Name)

	// The engine stores the timer; the request's ID is derived from it.
	timers := map[string]string{check.TimerName(): "timer-envelope-1"}
	stored := saga.Input{Exists: true, State: res.To, Data: res.Data, SchemaVersion: res.SchemaVersion, Key: "l-1", Now: now, Timers: timers}

	late := stored
	late.Msg, late.MsgType, late.MessageID = CreditChecked{LoanID: "l-1", OK: true}, check.Completed.Name(), "m-2"
	late.CausationID = "some-older-request"
	r, _ := m.Apply(late)
	fmt.Println("answer to another request:", r.Outcome, "stale:", r.Stale)

	answer := late
	answer.CausationID = saga.RequestID("timer-envelope-1")
	r, _ = m.Apply(answer)
	fmt.Println("answer:", r.Outcome, r.To, string(r.Data), "cancels", r.Unscheduled)
	// Output:
	// valid: true
	// sent saga_test.CheckCredit with timeout idem.request/credit
	// answer to another request: ignored stale: true
	// answer: applied Decided {"Decision":"credit ok: true"} cancels [idem.request/credit]
}

// A saga opts in to the fault of the command it sends: when the consumer
// dead-letters the command, the saga receives saga.Fault[ChargeCard],
// written in the dead letter's own commit.
func ExampleNewFault() {
	type Order struct{ Status string }
	type Checkout struct{ OrderID string }
	type ChargeCard struct{ OrderID string }

	m := saga.New[Order]("checkout")
	charging, failed := m.State("Charging"), m.Final("Failed")
	checkout := saga.NewEvent(m, func(e Checkout) string { return e.OrderID })
	chargeFailed := saga.NewFault[ChargeCard](m)
	m.Initially(saga.When(checkout).Then(func(c *saga.Context[Order], e Checkout) error {
		c.Send(ChargeCard(e))
		return nil
	}).TransitionTo(charging))
	m.During(charging, saga.Ignore(checkout), saga.When(chargeFailed).Then(func(c *saga.Context[Order], f saga.Fault[ChargeCard]) error {
		c.Data.Status = f.Reason + ": " + f.Error
		return nil
	}).TransitionTo(failed))

	// The engine marks every ChargeCard the saga sends with this fault type
	// (header idem-fault), and the consumer that dead-letters one emits it.
	fmt.Println(m.FaultFor("saga_test.ChargeCard"))
	body := `{"saga_key":"o-1","message_id":"charge-1","message_type":"saga_test.ChargeCard","message":{"OrderID":"o-1"},"reason":"permanent_error","error":"card declined"}`
	msg, key, _ := m.Decode(chargeFailed.Name(), []byte(body))
	res, _ := m.Apply(saga.Input{Exists: true, State: charging, Data: []byte(`{}`), SchemaVersion: 1, Msg: msg, MsgType: chargeFailed.Name(), Key: key, MessageID: "f-1"})
	fmt.Println(res.To, string(res.Data))
	// Output:
	// idem.Fault[saga_test.ChargeCard]@checkout
	// Failed {"Status":"permanent_error: card declined"}
}

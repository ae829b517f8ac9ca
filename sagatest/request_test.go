package sagatest_test

import (
	"testing"
	"time"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/sagatest"
)

type (
	lookup       struct{ ID string }
	lookupReq    struct{ ID string }
	lookupResp   struct{ ID string }
	lookupResult struct{ Answer string }
)

func lookupMachine() *saga.Machine[lookupResult] {
	m := saga.New[lookupResult]("lookup")
	waiting, done := m.State("Waiting"), m.Final("Done")
	start := saga.NewEvent(m, func(l lookup) string { return l.ID })
	r := saga.NewRequest[lookupReq](m, "lookup", func(l lookupResp) string { return l.ID })
	m.Initially(saga.When(start).Then(func(c *saga.Context[lookupResult], l lookup) error {
		r.Send(c, lookupReq(l), time.Minute)
		return nil
	}).TransitionTo(waiting))
	m.During(waiting, saga.Ignore(start),
		saga.When(r.Completed).Then(func(c *saga.Context[lookupResult], _ lookupResp) error {
			c.Data.Answer = "response"
			return nil
		}).TransitionTo(done),
		saga.When(r.TimeoutExpired).Then(func(c *saga.Context[lookupResult], _ saga.Timeout[lookupReq]) error {
			c.Data.Answer = "timeout"
			return nil
		}).TransitionTo(done),
		saga.Ignore(r.Faulted))
	return m
}

// A request tested with the harness: the captured command's ID is what the
// response's CausationID names; copies of the response apply once, and the
// timeout no longer fires.
func TestHarnessRequest(t *testing.T) {
	h := sagatest.New(t, lookupMachine(), &sagatest.Options{Copies: 3, Replicas: 2})
	h.Deliver("start-1", lookup{ID: "a"})
	h.Settle()
	reqs := h.EmittedOf(saga.MessageType(lookupReq{}))
	if len(reqs) != 1 {
		t.Fatalf("%d requests emitted, want 1", len(reqs))
	}
	resp, err := h.Engines[0].NewEnvelope("resp-1", lookupResp{ID: "a"})
	if err != nil {
		t.Fatal(err)
	}
	resp.CausationID = reqs[0].ID
	h.DeliverEnvelope(resp, 0)
	h.Settle()
	h.Advance(time.Hour)
	h.AssertState("a", "Done")
	if _, data, _ := h.State("a"); data.Answer != "response" {
		t.Errorf("answer %q, want response", data.Answer)
	}
	if s := h.Stats(); s.Applied != 2 || s.TimersFired != 0 {
		t.Errorf("stats %+v: want 2 applied (start, response) and no timer fired", s)
	}
}

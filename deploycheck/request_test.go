package deploycheck_test

import (
	"testing"

	"github.com/idemhq/idem/deploycheck"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store/readmodel"
)

type (
	charge  struct{ ID string }
	charged struct{ ID string }
)

// payMachine declares request name; when renamedFrom is set it also
// declares the old timeout type renamed, as the check's Fix says.
func payMachine(name, renamedFrom string) saga.Description {
	m := saga.New[doc]("pay")
	waiting, done := m.State("Waiting"), m.Final("Done")
	s := saga.NewEvent[started](m, func(e started) string { return e.ID })
	rq := saga.NewRequest[charge, charged](m, name, func(c charged) string { return c.ID })
	m.Initially(saga.When(s).TransitionTo(waiting))
	m.During(waiting, saga.Ignore(s), saga.When(rq.Completed).TransitionTo(done),
		saga.When(rq.TimeoutExpired).TransitionTo(done), saga.When(rq.Faulted).TransitionTo(done))
	if renamedFrom != "" {
		m.RenameMessage("idem.Timeout["+renamedFrom+"]@pay", "idem.Timeout["+name+"]@pay")
	}
	return m.Describe()
}

// A request renamed: the pending requests' timers keep the old timer
// name, which the new machine never looks up, so their responses and
// timeouts would all be ignored as stale. Renaming the old timeout type
// (RenameMessage) does not serve them: a timer-orphaned hazard for the
// request remains.
func TestRenamedRequestLeavesItsPendingRequestsOrphaned(t *testing.T) {
	c := &readmodel.Census{
		States: []readmodel.LiveStateCount{{SagaType: "pay", State: "Waiting", SchemaVersion: 1, Count: 3}},
		Timers: []readmodel.TimerCount{{SagaType: "pay", State: "Waiting", Name: saga.RequestTimerPrefix + "charge", EventType: "idem.Timeout[charge]@pay", Count: 3}},
	}
	in := &deploycheck.Input{Census: c, Previous: map[string][]deploycheck.Recorded{"pay": {recorded(payMachine("charge", ""))}}}
	r := deploycheck.Compare(in, deploycheck.Options{Machines: []saga.Description{payMachine("charge2", "charge")}})
	if len(r.Hazards) != 1 || r.Hazards[0].Kind != deploycheck.TimerOrphaned || r.Hazards[0].Count != 3 || r.Hazards[0].Event != saga.RequestTimerPrefix+"charge" {
		t.Fatalf("hazards %+v; want one timer-orphaned hazard for the 3 pending requests whose timer %q the new machine no longer has", r.Hazards, saga.RequestTimerPrefix+"charge")
	}
	same := deploycheck.Compare(in, deploycheck.Options{Machines: []saga.Description{payMachine("charge", "")}})
	if !same.OK() {
		t.Errorf("the same request: hazards %+v; want none", same.Hazards)
	}
}

package deploycheck_test

import (
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/deploycheck"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// jobWithHold is definition A: Waiting -> Held -> Done. withHold false is
// definition B: Held removed, Waiting -> Done.
func jobWithHold(withHold bool) saga.Description {
	m := saga.New[doc]("job")
	waiting, done := m.State("Waiting"), m.Final("Done")
	s := saga.NewEvent[started](m, func(e started) string { return e.ID })
	n := saga.NewEvent[nudged](m, func(e nudged) string { return e.ID })
	m.Initially(saga.When(s).TransitionTo(waiting))
	if withHold {
		held := m.State("Held")
		m.During(waiting, saga.Ignore(s), saga.When(n).TransitionTo(held))
		m.During(held, saga.Ignore(s), saga.When(n).TransitionTo(done))
	} else {
		m.During(waiting, saga.Ignore(s), saga.When(n).TransitionTo(done))
	}
	return m.Describe()
}

// Old replicas of A still run during the rollout and keep moving sagas
// into Held, which B removed; no saga is in Held at the time of the
// check. Once the old replicas stop, those sagas would be dead-lettered
// as unknown_state: a mixed-fleet hazard naming Held.
func TestMixedFleetEntersARemovedState(t *testing.T) {
	now := time.Now()
	a, b := jobWithHold(true), jobWithHold(false)
	in := &deploycheck.Input{
		Census:   &readmodel.Census{States: []readmodel.LiveStateCount{{SagaType: "job", State: "Waiting", SchemaVersion: 1, Count: 5}}},
		Previous: map[string][]deploycheck.Recorded{"job": {recorded(a)}},
		Replicas: []store.Replica{{ID: "old-1", BeatAt: now, Interval: time.Second, Definitions: map[string]string{"job": a.Fingerprint()}}},
	}
	r := deploycheck.Compare(in, deploycheck.Options{Machines: []saga.Description{b}, Now: now})
	if len(r.Hazards) != 1 || r.Hazards[0].Kind != deploycheck.MixedFleet || !strings.Contains(r.Hazards[0].Detail, "Held") {
		t.Fatalf("hazards %+v, notices %+v; want one mixed-fleet hazard: the old replicas enter Held, which the new build neither declares nor migrates", r.Hazards, r.Notices)
	}
}

type audited struct{ ID string }

// jobAudited is machine(false,false) plus a new event type, audited,
// handled in Waiting.
func jobAudited() saga.Description {
	m := saga.New[doc]("job")
	waiting, done := m.State("Waiting"), m.Final("Done")
	s := saga.NewEvent[started](m, func(e started) string { return e.ID })
	n := saga.NewEvent[nudged](m, func(e nudged) string { return e.ID })
	a := saga.NewEvent[audited](m, func(e audited) string { return e.ID })
	m.Initially(saga.When(s).TransitionTo(waiting))
	m.During(waiting, saga.Ignore(s), saga.When(n).TransitionTo(done), saga.When(a).TransitionTo(done))
	return m.Describe()
}

// The new build consumes a message type the old replicas do not: on a
// shared queue an old replica that takes one dead-letters it at once
// (unknown_type; no give-back): a mixed-fleet hazard naming the type.
func TestMixedFleetNewMessageType(t *testing.T) {
	now := time.Now()
	a := machine(false, false)
	in := &deploycheck.Input{
		Census:   census(),
		Previous: map[string][]deploycheck.Recorded{"job": {recorded(a)}},
		Replicas: []store.Replica{{ID: "old-1", BeatAt: now, Interval: time.Second, Definitions: map[string]string{"job": a.Fingerprint()}}},
	}
	r := deploycheck.Compare(in, deploycheck.Options{Machines: []saga.Description{jobAudited()}, Now: now})
	if len(r.Hazards) != 1 || r.Hazards[0].Kind != deploycheck.MixedFleet || !strings.Contains(r.Hazards[0].Detail, saga.MessageType(audited{})) {
		t.Fatalf("hazards %+v, notices %+v; want one mixed-fleet hazard: old replicas dead-letter the new type %q as unknown_type", r.Hazards, r.Notices, saga.MessageType(audited{}))
	}
}

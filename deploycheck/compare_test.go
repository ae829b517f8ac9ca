package deploycheck_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/deploycheck"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

type doc struct{}

type (
	started struct{ ID string }
	nudged  struct{ ID string }
)

// machine builds a two-state machine; nudgeIgnored makes Waiting ignore
// nudged instead of handling it, dropNudge leaves nudged out of Waiting.
func machine(nudgeIgnored, dropNudge bool) saga.Description {
	m := saga.New[doc]("job")
	waiting, done := m.State("Waiting"), m.Final("Done")
	s := saga.NewEvent[started](m, func(e started) string { return e.ID })
	n := saga.NewEvent[nudged](m, func(e nudged) string { return e.ID })
	m.Initially(saga.When(s).TransitionTo(waiting))
	switch {
	case dropNudge:
		m.During(waiting, saga.Ignore(s))
		m.During(done, saga.When(n).TransitionTo(done))
	case nudgeIgnored:
		m.During(waiting, saga.Ignore(s), saga.Ignore(n))
	default:
		m.During(waiting, saga.Ignore(s), saga.When(n).TransitionTo(done))
	}
	return m.Describe()
}

var nudgedType = saga.MessageType(nudged{})

func census(msgs ...readmodel.MessageCount) *readmodel.Census {
	return &readmodel.Census{States: []readmodel.LiveStateCount{{SagaType: "job", State: "Waiting", SchemaVersion: 1, Count: 7}}, Messages: msgs}
}

func recorded(d saga.Description) deploycheck.Recorded {
	return deploycheck.Recorded{Definition: store.Definition{SagaType: d.Name, Fingerprint: d.Fingerprint()}, Description: d}
}

// A queued or outboxed message counts against a state that no longer
// accepts its type only when a recorded definition accepted it there (or
// none is recorded): a state that refused it before changed nothing.
func TestEventRefusedByMessagesNeedsAChange(t *testing.T) {
	queued := readmodel.MessageCount{Type: nudgedType, Where: readmodel.InQueue, Count: 4}
	newBuild := deploycheck.Options{Machines: []saga.Description{machine(false, true)}}
	for _, c := range []struct {
		name     string
		previous []saga.Description
		want     int
	}{
		{"nothing recorded", nil, 1},
		{"the previous definition handled it", []saga.Description{machine(false, false)}, 1},
		{"the previous definition ignored it", []saga.Description{machine(true, false)}, 1},
		{"the previous definition refused it too", []saga.Description{machine(false, true)}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := &deploycheck.Input{Census: census(queued), Previous: map[string][]deploycheck.Recorded{}}
			for _, d := range c.previous {
				in.Previous["job"] = append(in.Previous["job"], recorded(d))
			}
			r := deploycheck.Compare(in, newBuild)
			if len(r.Hazards) != c.want {
				t.Fatalf("hazards %+v; want %d", r.Hazards, c.want)
			}
			if c.want == 1 && (r.Hazards[0].Kind != deploycheck.EventRefused || r.Hazards[0].Count != 7 || !strings.Contains(r.Hazards[0].Detail, "4 message(s)")) {
				t.Errorf("hazard %+v; want event-refused for the 7 sagas, naming the 4 messages", r.Hazards[0])
			}
		})
	}
}

// An outbox message of a type no machine consumes goes to another
// service: a hazard only when a recorded definition consumed it. A queued
// one always needs a consumer here.
func TestUnconsumedOutboxNeedsAPreviousConsumer(t *testing.T) {
	msg := func(where string) readmodel.MessageCount {
		return readmodel.MessageCount{Type: "billing.Invoice", Where: where, Count: 2}
	}
	opts := deploycheck.Options{Machines: []saga.Description{machine(false, false)}}
	if r := deploycheck.Compare(&deploycheck.Input{Census: census(msg(readmodel.InOutbox))}, opts); !r.OK() {
		t.Errorf("outbox message for another service: hazards %+v; want none", r.Hazards)
	}
	if r := deploycheck.Compare(&deploycheck.Input{Census: census(msg(readmodel.InQueue))}, opts); len(r.Hazards) != 1 || r.Hazards[0].Kind != deploycheck.MessageUnconsumed || r.Hazards[0].Count != 2 {
		t.Errorf("queued message nothing consumes: hazards %+v; want one message-unconsumed of 2", r.Hazards)
	}
	consumer := saga.Description{Name: "billing", Events: []saga.EventDescription{{Type: "billing.Invoice"}}}
	in := &deploycheck.Input{Census: census(msg(readmodel.InOutbox)), Previous: map[string][]deploycheck.Recorded{"billing": {recorded(consumer)}}}
	if r := deploycheck.Compare(in, opts); len(r.Hazards) != 1 || r.Hazards[0].Kind != deploycheck.MessageUnconsumed {
		t.Errorf("outbox message a previous definition consumed: hazards %+v; want one message-unconsumed", r.Hazards)
	}
	if r := deploycheck.Compare(&deploycheck.Input{Census: census(msg(readmodel.InQueue))}, deploycheck.Options{Machines: opts.Machines, Handled: []string{"billing.Invoice"}}); !r.OK() {
		t.Errorf("queued message a plain handler consumes: hazards %+v; want none", r.Hazards)
	}
}

// A live replica of a definition that was never recorded cannot be
// judged: a hazard. Stopped and gone replicas, and the checking engine
// itself, are not the fleet.
func TestMixedFleetOfAnUnrecordedDefinition(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	rep := func(id string, beat time.Time, stopped bool) store.Replica {
		r := store.Replica{ID: id, BeatAt: beat, Interval: time.Second, Definitions: map[string]string{"job": "v1:old"}}
		if stopped {
			r.StoppedAt = beat
		}
		return r
	}
	in := &deploycheck.Input{Census: census(), Replicas: []store.Replica{
		rep("alive", now, false), rep("self", now, false), rep("stopped", now, true), rep("gone", now.Add(-time.Hour), false),
	}}
	r := deploycheck.Compare(in, deploycheck.Options{Machines: []saga.Description{machine(false, false)}, Self: "self", Now: now})
	if len(r.Hazards) != 1 || r.Hazards[0].Kind != deploycheck.MixedFleet || r.Hazards[0].Count != 1 || !strings.Contains(r.Hazards[0].Detail, "alive") {
		t.Fatalf("hazards %+v; want one mixed-fleet hazard for the one live replica", r.Hazards)
	}
}

// The text report quotes a hostile name, says the verdict, and Error
// lists each hazard with what to change.
func TestReportTextAndError(t *testing.T) {
	hostile := "Wai\tting<script>\x00"
	in := &deploycheck.Input{Census: &readmodel.Census{States: []readmodel.LiveStateCount{{SagaType: "job", State: hostile, SchemaVersion: 1, Count: 3}}}}
	r := deploycheck.Compare(in, deploycheck.Options{Machines: []saga.Description{machine(false, false)}})
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, `"Wai\tting<script>\x00"`) || !strings.Contains(out, "NOT safe to deploy: 1 hazard(s)") || !strings.Contains(out, "3 live saga(s) of 1 type(s)") {
		t.Errorf("text report:\n%s\nwant the hostile state quoted, the verdict and the live count", out)
	}
	err := r.Error()
	if err == nil || !strings.Contains(err.Error(), "state-removed") || !strings.Contains(err.Error(), "MigrateState(") {
		t.Errorf("Error() = %v; want the hazard and its fix", err)
	}
	ok := deploycheck.Compare(&deploycheck.Input{Census: census()}, deploycheck.Options{Machines: []saga.Description{machine(false, false)}})
	b.Reset()
	_ = ok.WriteText(&b)
	if ok.Error() != nil || !strings.HasPrefix(b.String(), "safe to deploy") {
		t.Errorf("a clean report: Error %v, text %q", ok.Error(), b.String())
	}
}

// Compare a new build with what a store holds: seven live sagas wait in a
// state the new machine dropped.
func ExampleCompare() {
	m := saga.New[doc]("job")
	done := m.Final("Done")
	s := saga.NewEvent[started](m, func(e started) string { return e.ID })
	m.Initially(saga.When(s).TransitionTo(done))

	in := &deploycheck.Input{Census: census()} // deploycheck.Check reads it from a store
	r := deploycheck.Compare(in, deploycheck.Options{Machines: []saga.Description{m.Describe()}})
	for _, h := range r.Hazards {
		fmt.Println(h.Kind, h.State, h.Count)
	}
	fmt.Println(r.OK())
	// Output:
	// state-removed Waiting 7
	// false
}

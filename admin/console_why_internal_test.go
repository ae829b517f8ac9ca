package admin

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// The verdict names the most urgent reason first.
func TestWhyVerdict(t *testing.T) {
	now := time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)
	g := &saga.Graph{States: []saga.GraphState{{Name: "Waiting"}, {Name: "Idle"}, {Name: "Done", Final: true}}, Edges: []saga.GraphEdge{
		{From: "Waiting", To: "Done", Event: "x.Paid", Label: "Paid"},
		{From: "Waiting", To: "Waiting", Event: "x.Nudged", Label: "Nudged"},
		{From: "Waiting", To: "Idle", Event: "x.Paid", Label: "Paid"},
	}}
	active := func(state string) *store.Instance { return &store.Instance{State: state} }
	timer := func(name string, due time.Duration) store.Timer {
		return store.Timer{Name: name, DueAt: now.Add(due)}
	}
	dl := func(reason string, ago time.Duration) store.DeadLetter {
		return store.DeadLetter{Reason: reason, LastFailedAt: now.Add(-ago)}
	}
	for _, c := range []struct {
		name string
		in   whyInput
		want string
	}{
		{"finished", whyInput{In: &store.Instance{State: "Done", FinishedAt: now}, Graph: g, DeadLetters: []store.DeadLetter{dl("r", 0)}}, "finished"},
		{"two dead letters, latest named", whyInput{In: active("Waiting"), Graph: g, DeadLetters: []store.DeadLetter{dl("old", time.Hour), dl("new", time.Minute)}}, "2 messages are dead-lettered (latest: new)"},
		{"request past deadline", whyInput{In: active("Waiting"), Graph: g, Timers: []store.Timer{timer("t", -time.Minute), timer(saga.RequestTimerPrefix+"auth", -2*time.Minute)}}, "a request is past its deadline by 2m 0s (auth)"},
		{"timer overdue", whyInput{In: active("Waiting"), Graph: g, Timers: []store.Timer{timer("t", -3*time.Minute), timer("later", time.Hour)}}, "a timer is overdue by 3m 0s (t)"},
		{"waiting, events once each", whyInput{In: active("Waiting"), Graph: g, Timers: []store.Timer{timer("later", time.Hour)}}, "waiting for one of: Paid, Nudged"},
		{"no event accepted", whyInput{In: active("Idle"), Graph: g}, `stuck: state "Idle" accepts no event`},
		{"unknown state", whyInput{In: active("Gone"), Graph: g}, `stuck: the registered machine has no state "Gone"`},
		{"not registered", whyInput{In: active("Waiting")}, "waiting: machine not registered here, so what it accepts is not known"},
	} {
		c.in.Now = now
		if got := buildWhy(c.in).Verdict; got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	p := buildWhy(whyInput{In: active("Waiting"), Graph: g, Now: now})
	if len(p.Accepts) != 2 || len(p.Accepts[0].To) != 2 || p.Accepts[0].To[1] != "Idle" {
		t.Errorf("accepted events of Waiting: got %+v, want Paid → Done, Idle and Nudged → Waiting", p.Accepts)
	}
}

// A message waiting for admission comes before overdue timers and the
// events the state accepts, names its limit and key quoted, and says why
// from the limit's kind; dead letters and retries still come first.
func TestWhyVerdictAdmission(t *testing.T) {
	now := time.Date(2026, 11, 26, 5, 0, 0, 0, time.UTC)
	g := &saga.Graph{States: []saga.GraphState{{Name: "Waiting"}}, Edges: []saga.GraphEdge{{From: "Waiting", To: "Waiting", Event: "x.Paid", Label: "Paid"}}}
	active := &store.Instance{State: "Waiting"}
	wait := func(name, key, reason string) whyAdmission {
		return whyAdmission{AdmissionWait: store.AdmissionWait{MessageID: "m", MessageType: "x.Charge", Limit: store.LimitKey{Name: name, Key: key}}, Reason: reason}
	}
	overdue := []store.Timer{{Name: "t", DueAt: now.Add(-time.Minute)}}
	for _, c := range []struct {
		name string
		in   whyInput
		want string
	}{
		{"cap", whyInput{Admission: []whyAdmission{wait("parser-api", "tenant-a", refusalReason(store.Limit{Concurrency: 2}))}, Timers: overdue},
			`waiting for admission: limit "parser-api" (key "tenant-a") is at its cap`},
		{"rate, unpartitioned", whyInput{Admission: []whyAdmission{wait("mail", "", refusalReason(store.Limit{Rate: 1}))}},
			`waiting for admission: limit "mail" has no tokens`},
		{"both kinds, two messages", whyInput{Admission: []whyAdmission{wait("api", "k", refusalReason(store.Limit{Concurrency: 1, Rate: 1})), wait("api", "k", "")}},
			`2 messages waiting for admission: limit "api" (key "k") is at its cap or has no tokens`},
		{"no values in force, hostile key", whyInput{Admission: []whyAdmission{wait("gone", "<script>\x00", "")}},
			`waiting for admission under limit "gone" (key "<script>\x00")`},
		{"a dead letter first", whyInput{Admission: []whyAdmission{wait("api", "", "is at its cap")}, DeadLetters: []store.DeadLetter{{Reason: "r"}}},
			"a message is dead-lettered (r)"},
	} {
		c.in.In, c.in.Graph, c.in.Now = active, g, now
		if got := buildWhy(c.in).Verdict; got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	retrying := buildWhy(whyInput{In: active, Graph: g, Now: now, Admission: []whyAdmission{wait("api", "", "is at its cap")},
		Retries: []store.Retry{{MessageType: "x.Charge", Attempts: 1, NextAttemptAt: now.Add(time.Minute)}}})
	if !strings.HasPrefix(retrying.Verdict, "retrying:") {
		t.Errorf("retrying and waiting for admission: got %q, want the retry first", retrying.Verdict)
	}
}

// fakeWaiter is a store.AdmissionWaiter that returns ws for every key.
type fakeWaiter struct{ ws []store.AdmissionWait }

func (f fakeWaiter) AdmissionWaitsOf(context.Context, string) ([]store.AdmissionWait, error) {
	return f.ws, nil
}

// A saga's admission waits are found by its key alone, which a saga of
// another type may share: with the machine's message types, only its
// own messages are kept; without (the machine is not registered here),
// every wait of the key.
func TestAdmissionWaitsKeepTheSagasTypes(t *testing.T) {
	ws := []store.AdmissionWait{
		{MessageID: "a", MessageType: "shipment.Book", Limit: store.LimitKey{Name: "carrier-api"}},
		{MessageID: "b", MessageType: "order.Charge", Limit: store.LimitKey{Name: "psp"}},
	}
	p := &parts{caps: &capabilities{admissionWaits: fakeWaiter{ws}}}
	got, err := p.admissionWaitsOf(t.Context(), "42", []string{"order.Placed", "order.Charge"})
	if err != nil || len(got) != 1 || got[0].MessageID != "b" {
		t.Fatalf("waits of order/42: got %+v, %v, want only b (order.Charge)", got, err)
	}
	if got, err := p.admissionWaitsOf(t.Context(), "42", nil); err != nil || len(got) != 2 {
		t.Fatalf("waits of 42, machine not registered: got %+v, %v, want both", got, err)
	}
	if got, err := p.admissionWaitsOf(t.Context(), "42", []string{"invoice.Sent"}); err != nil || len(got) != 0 {
		t.Fatalf("waits of a saga none of whose types waits: got %+v, %v, want none", got, err)
	}
	many := make([]whyAdmission, store.MaxAdmissionWaitsOf)
	for i := range many {
		many[i] = whyAdmission{AdmissionWait: ws[1]}
	}
	if v, _ := (&whyPanel{Admission: many}).admissionVerdict(); !strings.HasPrefix(v, "20 or more messages waiting") {
		t.Errorf("verdict with the store's bound of waits: got %q, want it to say 20 or more", v)
	}
}

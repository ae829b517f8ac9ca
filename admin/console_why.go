package admin

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
)

// whyPanel answers "why is this saga stuck?" on the instance page, from
// what the store already holds and the machine this process registers.
type whyPanel struct {
	// Verdict is the one-line answer; Kind styles it ("done", "warn",
	// "wait").
	Verdict string
	Kind    string
	// Registered is false when this process registers no machine of the
	// saga's type (or one that cannot describe its transitions).
	Registered bool
	// UnknownState is set when the machine declares no such state.
	UnknownState bool
	Accepts      []acceptedEvent
	Timers       []whyTimer
	Requests     []whyTimer
	DeadLetters  []store.DeadLetter
	// Retries are the saga's messages being retried (console_why_retrying.go).
	Retries []store.Retry
	// Admission are the saga's messages waiting for admission under a
	// flow-control limit (console_why_admission.go).
	Admission []whyAdmission
}

// acceptedEvent is one event the saga's current state handles.
type acceptedEvent struct {
	Label string
	Event string
	To    []string
}

// whyTimer is a pending timer, or a pending request's timeout.
type whyTimer struct {
	Name      string
	RequestID string
	DueAt     time.Time
	Overdue   time.Duration
}

// whyInput is what the panel is built from.
type whyInput struct {
	In          *store.Instance
	Graph       *saga.Graph // nil: the saga type is not registered here
	Timers      []store.Timer
	DeadLetters []store.DeadLetter
	Retries     []store.Retry
	Admission   []whyAdmission
	Now         time.Time
}

// maxWhyDeadLetters bounds the dead letters the panel lists.
const maxWhyDeadLetters = 5

func buildWhy(in whyInput) *whyPanel {
	p := &whyPanel{Registered: in.Graph != nil}
	if in.Graph != nil {
		p.Accepts, p.UnknownState = accepted(*in.Graph, in.In.State)
	}
	for _, t := range in.Timers {
		w := whyTimer{Name: t.Name, DueAt: t.DueAt}
		if in.Now.After(t.DueAt) {
			w.Overdue = in.Now.Sub(t.DueAt)
		}
		if name, ok := strings.CutPrefix(t.Name, saga.RequestTimerPrefix); ok {
			w.Name, w.RequestID = name, saga.RequestID(t.Envelope.ID)
			p.Requests = append(p.Requests, w)
			continue
		}
		p.Timers = append(p.Timers, w)
	}
	p.DeadLetters = slices.Clone(in.DeadLetters)
	slices.SortStableFunc(p.DeadLetters, func(a, b store.DeadLetter) int { return b.LastFailedAt.Compare(a.LastFailedAt) })
	if len(p.DeadLetters) > maxWhyDeadLetters {
		p.DeadLetters = p.DeadLetters[:maxWhyDeadLetters]
	}
	p.Retries, p.Admission = in.Retries, in.Admission
	p.Verdict, p.Kind = p.verdict(in.In, len(in.DeadLetters))
	if v, ok := p.retrying(in.In, in.Now); ok {
		p.Verdict, p.Kind = v, "warn"
	}
	return p
}

// accepted lists the events state s handles, in the machine's order, each
// with the states it may lead to; unknown is true when the machine
// declares no state s.
func accepted(g saga.Graph, s string) (out []acceptedEvent, unknown bool) {
	unknown = !slices.ContainsFunc(g.States, func(st saga.GraphState) bool { return string(st.Name) == s })
	for _, e := range g.Edges {
		if string(e.From) != s {
			continue
		}
		i := slices.IndexFunc(out, func(a acceptedEvent) bool { return a.Event == e.Event })
		if i < 0 {
			out = append(out, acceptedEvent{Label: e.Label, Event: e.Event})
			i = len(out) - 1
		}
		out[i].To = append(out[i].To, string(e.To))
	}
	return out, unknown
}

// verdict is the panel's one line, most urgent first: finished, a dead
// letter, a message waiting for admission, an overdue timer or request,
// then what the saga waits for.
func (p *whyPanel) verdict(in *store.Instance, deadLetters int) (string, string) {
	switch {
	case in.Status() == store.StatusFinished:
		return "finished", "done"
	case deadLetters == 1:
		return "a message is dead-lettered (" + p.DeadLetters[0].Reason + ")", "warn"
	case deadLetters > 1:
		return strconv.Itoa(deadLetters) + " messages are dead-lettered (latest: " + p.DeadLetters[0].Reason + ")", "warn"
	}
	if v, ok := p.admissionVerdict(); ok {
		return v, "wait"
	}
	if t, ok := p.mostOverdue(); ok && t.RequestID != "" {
		return "a request is past its deadline by " + span(t.Overdue) + " (" + t.Name + ")", "warn"
	} else if ok {
		return "a timer is overdue by " + span(t.Overdue) + " (" + t.Name + ")", "warn"
	}
	switch {
	case !p.Registered:
		return "waiting: machine not registered here, so what it accepts is not known", "wait"
	case p.UnknownState:
		return "stuck: the registered machine has no state " + strconv.Quote(in.State), "warn"
	case len(p.Accepts) == 0:
		return "stuck: state " + strconv.Quote(in.State) + " accepts no event", "warn"
	}
	labels := make([]string, len(p.Accepts))
	for i, a := range p.Accepts {
		labels[i] = a.Label
	}
	return "waiting for one of: " + strings.Join(labels, ", "), "wait"
}

// mostOverdue returns the timer or request furthest past its due time.
func (p *whyPanel) mostOverdue() (whyTimer, bool) {
	var worst whyTimer
	for _, t := range append(slices.Clone(p.Timers), p.Requests...) {
		if t.Overdue > worst.Overdue {
			worst = t
		}
	}
	return worst, worst.Overdue > 0
}

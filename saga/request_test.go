package saga_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/saga"
)

type (
	Quote      struct{ Item string }
	QuoteAsked struct{ Item string }
	Quoted     struct {
		Item  string
		Price int
	}
	Ask struct{ Item string }
)

type Shop struct {
	Price  int    `json:"price,omitempty"`
	Result string `json:"result,omitempty"`
}

// requestFixture asks for a quote when Ask arrives and records the outcome.
func requestFixture() (*saga.Machine[Shop], *saga.Request[Shop, Quote, Quoted]) {
	m := saga.New[Shop]("shop")
	waiting, done := m.State("Waiting"), m.Final("Done")
	ask := saga.NewEvent(m, func(a Ask) string { return a.Item })
	r := saga.NewRequest[Quote](m, "quote", func(q Quoted) string { return q.Item })
	m.Initially(saga.When(ask).Then(func(c *saga.Context[Shop], a Ask) error {
		r.Send(c, Quote(a), time.Minute)
		return nil
	}).TransitionTo(waiting))
	m.During(waiting,
		saga.When(ask).Then(func(c *saga.Context[Shop], a Ask) error {
			r.Send(c, Quote(a), time.Minute)
			return nil
		}),
		saga.When(r.Completed).Then(func(c *saga.Context[Shop], q Quoted) error {
			c.Data.Price, c.Data.Result = q.Price, "quoted"
			return nil
		}).TransitionTo(done),
		saga.When(r.TimeoutExpired).Then(func(c *saga.Context[Shop], _ saga.Timeout[Quote]) error {
			c.Data.Result = "timeout"
			return nil
		}).TransitionTo(done),
		saga.When(r.Faulted).Then(func(c *saga.Context[Shop], f saga.Fault[Quote]) error {
			c.Data.Result = "fault " + f.Reason + " " + f.Message.Item
			return nil
		}).TransitionTo(done),
	)
	return m, r
}

// waitingShop is the fixture after Ask: its stored input fields, with the
// timeout timer under timerID.
func waitingShop(t *testing.T, timerID string) saga.Input {
	t.Helper()
	return saga.Input{Exists: true, State: "Waiting", Data: []byte(`{}`), SchemaVersion: 1, Key: "tea", Now: t0,
		Timers: map[string]string{saga.RequestTimerPrefix + "quote": timerID}}
}

func TestRequestSend(t *testing.T) {
	m, r := requestFixture()
	res, err := m.Apply(saga.Input{Msg: Ask{Item: "tea"}, MsgType: saga.MessageType(Ask{}), Key: "tea", MessageID: "m1", Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Scheduled) != 1 || len(res.Emitted) != 1 {
		t.Fatalf("scheduled %+v, emitted %+v: want one timeout and one command", res.Scheduled, res.Emitted)
	}
	s, em := res.Scheduled[0], res.Emitted[0]
	if s.Name != r.TimerName() || !s.DueAt.Equal(t0.Add(time.Minute)) || s.Type != r.TimeoutExpired.Name() {
		t.Errorf("timeout %+v: want %s due %s of type %s", s, r.TimerName(), t0.Add(time.Minute), r.TimeoutExpired.Name())
	}
	if to, ok := s.Msg.(saga.Timeout[Quote]); !ok || to.SagaKey != "tea" || to.Request.Item != "tea" {
		t.Errorf("timeout message %#v: want the saga key and the request", s.Msg)
	}
	if em.Index != s.Index+1 {
		t.Errorf("command index %d, timer index %d: the engine finds a request's timer at the index before it", em.Index, s.Index)
	}
	if em.RequestTimer != r.TimerName() || em.Intent != saga.IntentSend || em.Type != saga.MessageType(Quote{}) {
		t.Errorf("command %+v: want a send of Quote tied to timer %s", em, r.TimerName())
	}
	if got := m.FaultFor(saga.MessageType(Quote{})); got != r.Faulted.Name() || got != saga.FaultType("shop", saga.MessageType(Quote{})) {
		t.Errorf("FaultFor(Quote) = %q, want %q", got, r.Faulted.Name())
	}
	if got := m.FaultFor(saga.MessageType(Ask{})); got != "" {
		t.Errorf("FaultFor(Ask) = %q, want none (not opted in)", got)
	}
}

func TestRequestOutcomes(t *testing.T) {
	m, r := requestFixture()
	pending := saga.RequestID("timer-1")
	fault := func(id string) saga.Fault[Quote] {
		return saga.Fault[Quote]{SagaKey: "tea", MessageID: id, Reason: "malformed_body", Message: Quote{Item: "tea"}}
	}
	cases := []struct {
		name      string
		msg       any
		msgType   string
		causation string
		timers    bool
		want      string // result; "" when stale
	}{
		{"response", Quoted{Item: "tea", Price: 3}, r.Completed.Name(), pending, true, "quoted"},
		{"superseded response", Quoted{Item: "tea"}, r.Completed.Name(), saga.RequestID("timer-0"), true, ""},
		{"response without causation", Quoted{Item: "tea"}, r.Completed.Name(), "", true, ""},
		{"response after the timeout", Quoted{Item: "tea"}, r.Completed.Name(), pending, false, ""},
		{"fault", fault(pending), r.Faulted.Name(), "", true, "fault malformed_body tea"},
		{"superseded fault", fault("other"), r.Faulted.Name(), "", true, ""},
		{"timeout", saga.Timeout[Quote]{SagaKey: "tea"}, r.TimeoutExpired.Name(), "", true, "timeout"},
		{"timeout no longer pending", saga.Timeout[Quote]{SagaKey: "tea"}, r.TimeoutExpired.Name(), "", false, ""},
		{"timeout not from the timer", saga.Timeout[Quote]{SagaKey: "tea"}, r.TimeoutExpired.Name(), "forged", true, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := waitingShop(t, "timer-1")
			if !c.timers {
				in.Timers = nil
			}
			in.Msg, in.MsgType, in.CausationID, in.MessageID = c.msg, c.msgType, c.causation, "in-1"
			if c.msgType == r.TimeoutExpired.Name() {
				// A timer is delivered with its envelope ID; the case's
				// causation stands for another message's ID.
				in.MessageID, in.CausationID = "timer-1", ""
				if c.causation != "" {
					in.MessageID = c.causation
				}
			}
			res, err := m.Apply(in)
			if err != nil {
				t.Fatal(err)
			}
			if c.want == "" {
				if res.Outcome != saga.Ignored || !res.Stale {
					t.Fatalf("outcome %s, stale %v: want ignored as stale", res.Outcome, res.Stale)
				}
				return
			}
			var s Shop
			if err := json.Unmarshal(res.Data, &s); err != nil {
				t.Fatal(err)
			}
			if res.Outcome != saga.Applied || res.Stale || s.Result != c.want {
				t.Fatalf("outcome %s, stale %v, result %q: want applied, %q", res.Outcome, res.Stale, s.Result, c.want)
			}
			wantCancel := c.msgType != r.TimeoutExpired.Name() // the engine removes a fired timer itself
			if got := len(res.Unscheduled) == 1 && res.Unscheduled[0] == r.TimerName(); got != wantCancel {
				t.Errorf("unscheduled %v: want the timeout cancelled: %v", res.Unscheduled, wantCancel)
			}
		})
	}
}

// A response for a saga that does not exist follows the NotFound policy,
// not the stale rule.
func TestRequestResponseWithoutSaga(t *testing.T) {
	m, r := requestFixture()
	res, err := m.Apply(saga.Input{Msg: Quoted{Item: "tea"}, MsgType: r.Completed.Name(), Key: "tea", MessageID: "x", Now: t0})
	if err != nil || res.Outcome != saga.NotFound {
		t.Fatalf("got %s, %v; want not_found", res.Outcome, err)
	}
}

// Sending again in the same state supersedes: the new command is tied to
// the same timer name, which replaces the earlier timer.
func TestRequestResend(t *testing.T) {
	m, r := requestFixture()
	in := waitingShop(t, "timer-1")
	in.Msg, in.MsgType, in.MessageID = Ask{Item: "tea"}, saga.MessageType(Ask{}), "m2"
	res, err := m.Apply(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Scheduled) != 1 || res.Scheduled[0].Name != r.TimerName() || len(res.Emitted) != 1 || res.Emitted[0].RequestTimer != r.TimerName() {
		t.Fatalf("scheduled %+v, emitted %+v: want a new timeout and command", res.Scheduled, res.Emitted)
	}
}

func TestValidateReportsRequestEvents(t *testing.T) {
	m := saga.New[Shop]("shop")
	waiting, done := m.State("Waiting"), m.Final("Done")
	ask := saga.NewEvent(m, func(a Ask) string { return a.Item })
	r := saga.NewRequest[Quote](m, "quote", func(q Quoted) string { return q.Item })
	m.Initially(saga.When(ask).Then(func(c *saga.Context[Shop], a Ask) error {
		r.Send(c, Quote(a), time.Minute)
		return nil
	}).TransitionTo(waiting))
	m.During(waiting, saga.Ignore(ask), saga.When(r.Completed).TransitionTo(done))
	err := m.Validate()
	var got []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var p *saga.Problem
		if errors.As(e, &p) {
			got = append(got, p.Kind+" "+string(p.State)+" "+p.Event)
		}
	}
	for _, want := range []string{
		"unhandled Waiting " + r.TimeoutExpired.Name(),
		"unhandled Waiting " + r.Faulted.Name(),
		"unconsumed  " + r.TimeoutExpired.Name(),
		"unconsumed  " + r.Faulted.Name(),
	} {
		if !strings.Contains(strings.Join(got, "\n"), want) {
			t.Errorf("Validate problems %q: missing %q", got, want)
		}
	}
}

func TestRequestDeclarationPanics(t *testing.T) {
	cases := map[string]func(){
		"duplicate name": func() {
			m := saga.New[Shop]("shop")
			saga.NewRequest[Quote](m, "quote", func(q Quoted) string { return q.Item })
			saga.NewRequest[Ask](m, "quote", func(q QuoteAsked) string { return q.Item })
		},
		"empty name": func() {
			saga.NewRequest[Quote](saga.New[Shop]("shop"), "", func(q Quoted) string { return q.Item })
		},
		"hostile name": func() {
			saga.NewRequest[Quote](saga.New[Shop]("shop"), "q\x00\xff<script>", func(q Quoted) string { return q.Item })
		},
		"faults declared twice": func() {
			m := saga.New[Shop]("shop")
			saga.NewFault[Quote](m)
			saga.NewRequest[Quote](m, "quote", func(q Quoted) string { return q.Item })
		},
		"zero timeout": func() {
			m, r := requestFixture()
			_ = m
			r.Send(&saga.Context[Shop]{}, Quote{}, 0)
		},
	}
	for name, fn := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Errorf("no panic")
				}
			}()
			fn()
		})
	}
}

// The fault event decodes what the engine writes: the message and the
// reason, correlated by the sender's key.
func TestFaultDecode(t *testing.T) {
	m := saga.New[Shop]("shop")
	ev := saga.NewFault[Quote](m)
	body := `{"saga_key":"tea","message_id":"id-1","message_type":"saga_test.Quote","message":{"Item":"tea"},"reason":"permanent_error","error":"boom","at":"2025-03-01T12:00:00Z"}`
	msg, key, err := m.Decode(ev.Name(), []byte(body))
	if err != nil {
		t.Fatal(err)
	}
	f := msg.(saga.Fault[Quote])
	if key != "tea" || f.MessageID != "id-1" || f.Message.Item != "tea" || f.Reason != "permanent_error" || f.Error != "boom" {
		t.Errorf("decoded %+v key %q", f, key)
	}
}

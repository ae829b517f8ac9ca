package saga

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemhq/idem/internal/ids"
)

// Request is a request a saga sends and whose response, timeout or fault
// it awaits, in the manner of MassTransit's Request<>. Declare it once per
// machine with NewRequest and send it from a handler with Send. While a
// request is pending its timeout timer exists; the pending request's ID is
// derived from that timer's envelope ID, so it is persisted with the saga
// by the engine and no field of S has to remember it. A response, timeout
// or fault of any other request (a superseded one, or one answered or
// timed out already) is ignored and counted as stale.
type Request[S, Cmd, Resp any] struct {
	name  string
	timer string
	// Completed is the response event: a Resp whose CausationID is the ID
	// of the pending request. (An Idem saga or handler that consumes the
	// request and emits the response sets it; any other responder must set
	// the response envelope's CausationID to the request's ID.)
	Completed *Event[S, Resp]
	// TimeoutExpired is delivered when no response or fault came within
	// the timeout given to Send.
	TimeoutExpired *Event[S, Timeout[Cmd]]
	// Faulted is delivered when the consumer of the request dead-lettered
	// it.
	Faulted *Event[S, Fault[Cmd]]
}

// Timeout is the event of a request that got no response in time.
type Timeout[Cmd any] struct {
	// SagaKey is the key of the saga that sent the request.
	SagaKey string `json:"saga_key"`
	// Request is the command that was sent.
	Request Cmd `json:"request"`
}

type requestKind int

const (
	requestResponse requestKind = iota + 1
	requestTimeout
	requestFault
)

// requestEvent marks an event type as one of a request's three outcomes.
type requestEvent struct {
	timer string
	kind  requestKind
}

// RequestTimerPrefix starts the name of every request's timeout timer:
// the timer of request name is RequestTimerPrefix + name.
const RequestTimerPrefix = "idem.request/"

// NewRequest declares a request named name on m: commands of type Cmd,
// answered by responses of type Resp that correlate to the saga with
// correlate. The name must be unique in the machine, valid UTF-8 without
// control characters (it is part of a message type name); each of Cmd and Resp
// belongs to at most one request (or event) of the machine. Handle the
// request's Completed, TimeoutExpired and Faulted events with When or
// Ignore like any other event: Machine.Validate reports each state that
// neither handles nor ignores one of them. The type parameter S is inferred:
//
//	auth := saga.NewRequest[Authorize, Authorized](m, "authorize", func(a Authorized) string { return a.OrderID })
func NewRequest[Cmd, Resp, S any](m *Machine[S], name string, correlate func(Resp) string) *Request[S, Cmd, Resp] {
	timer := RequestTimerPrefix + name
	if name == "" || !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		panic(fmt.Sprintf("saga %s: request name %q is empty, not UTF-8 or has control characters", m.name, name))
	}
	for _, r := range m.requests {
		if r.timer == timer {
			panic(fmt.Sprintf("saga %s: request %q declared twice", m.name, name))
		}
	}
	r := &Request[S, Cmd, Resp]{name: name, timer: timer}
	r.Completed = NewEvent(m, correlate)
	r.TimeoutExpired = bindEvent(m, "idem.Timeout["+name+"]@"+m.name, func(t Timeout[Cmd]) string { return t.SagaKey })
	r.Faulted = NewFault[Cmd](m)
	if m.requests == nil {
		m.requests = map[string]requestEvent{}
	}
	m.requests[r.Completed.msgType] = requestEvent{timer: timer, kind: requestResponse}
	m.requests[r.TimeoutExpired.msgType] = requestEvent{timer: timer, kind: requestTimeout}
	m.requests[r.Faulted.msgType] = requestEvent{timer: timer, kind: requestFault}
	m.requestList = append(m.requestList, RequestDescription{
		Name: name, Timer: timer, Command: messageTypeFor[Cmd](),
		Response: r.Completed.msgType, Timeout: r.TimeoutExpired.msgType, Fault: r.Faulted.msgType,
	})
	return r
}

// Name returns the request's name.
func (r *Request[S, Cmd, Resp]) Name() string { return r.name }

// TimerName returns the name of the request's timeout timer.
func (r *Request[S, Cmd, Resp]) TimerName() string { return r.timer }

// Send buffers cmd as the saga's pending request and schedules its
// timeout: TimeoutExpired is delivered after timeout unless the response or
// a fault comes first. Sending again supersedes the pending request: its
// response, timeout and fault are then ignored. The command's ID is derived
// from the timeout timer's, so re-processing yields the same one. Send
// panics when timeout is not positive.
func (r *Request[S, Cmd, Resp]) Send(c *Context[S], cmd Cmd, timeout time.Duration) {
	if timeout <= 0 {
		panic(fmt.Sprintf("saga: request %s: timeout %v is not positive", r.name, timeout))
	}
	timer := c.index
	c.scheduled = append(c.scheduled, Scheduled{
		Name: r.timer, DueAt: c.now.Add(timeout), Type: r.TimeoutExpired.msgType,
		Msg: Timeout[Cmd]{SagaKey: c.key, Request: cmd}, Index: timer,
	})
	c.index++
	c.emitted = append(c.emitted, Emission{Intent: IntentSend, Type: MessageType(cmd), Msg: cmd, Index: c.index, RequestTimer: r.timer, RequestTimerIndex: timer})
	c.index++
}

// Pending reports the ID of the saga's pending request r, if any (during
// a handler, as the saga was when the message arrived).
func (r *Request[S, Cmd, Resp]) Pending(c *Context[S]) (string, bool) {
	id, ok := c.timers[r.timer]
	if !ok {
		return "", false
	}
	return RequestID(id), true
}

// RequestID returns the ID of the request whose timeout timer has the
// envelope ID timerID. The engine gives a request's command this ID.
func RequestID(timerID string) string { return ids.Derive("request", timerID) }

// requestCheck decides what a request event does before any behaviour
// runs: stale reports that it belongs to no pending request (it is then
// ignored), and timer names the timeout to cancel when it is applied.
func (m *Machine[S]) requestCheck(in Input) (stale bool, timer string) {
	rq, ok := m.requests[in.MsgType]
	if !ok {
		return false, ""
	}
	if !in.Exists {
		return false, "" // the machine's NotFound policy applies
	}
	timerID, pending := in.Timers[rq.timer]
	if !pending {
		return true, ""
	}
	switch rq.kind {
	case requestResponse:
		return in.CausationID != RequestID(timerID), rq.timer
	case requestFault:
		f, ok := in.Msg.(interface{ faultOf() string })
		return !ok || f.faultOf() != RequestID(timerID), rq.timer
	}
	// The timeout itself, delivered with the timer's envelope ID (the
	// engine removes the timer that fires): a copy published by anyone
	// else is not the saga's timeout.
	return in.MessageID != timerID, ""
}

package saga

import (
	"fmt"
	"time"
)

// Fault is the event a saga receives when a message it emitted was
// dead-lettered by the engine that consumed it. A saga opts in per message
// type with NewFault (or NewRequest, for a request's command): the
// emitted envelopes then carry the header transport.HeaderFault, and the
// consuming engine writes the fault in the same commit as the dead letter,
// so it cannot be lost. Its ID is derived from the dead-lettered message's,
// so a dead letter recorded twice yields one Fault at the saga.
type Fault[T any] struct {
	// SagaKey is the canonical key of the saga that sent the message; the
	// fault correlates to it.
	SagaKey string `json:"saga_key"`
	// MessageID and MessageType identify the dead-lettered envelope.
	MessageID   string `json:"message_id"`
	MessageType string `json:"message_type"`
	// Message is the dead-lettered message, decoded as T. It is the zero
	// value when its body was not JSON or too large to carry back.
	Message T `json:"message"`
	// Reason is the dead letter's reason (idem.Reason...), Error its error
	// text, and At the time of the dead-lettering.
	Reason string    `json:"reason"`
	Error  string    `json:"error"`
	At     time.Time `json:"at"`
}

// faultOf returns the ID of the message the fault is about.
func (f Fault[T]) faultOf() string { return f.MessageID }

// FaultType returns the message type name of the fault sent to a saga of
// type sagaType when a message of type msgType it emitted is
// dead-lettered. The saga type is part of the name, so that several saga
// types can receive faults of the same command.
func FaultType(sagaType, msgType string) string {
	return "idem.Fault[" + msgType + "]@" + sagaType
}

// NewFault declares that m handles the faults of the messages of type M it
// emits (with Context.Send or Context.Publish) and returns the fault
// event, to use in When, Ignore and During like any event. Machine.Validate
// reports the states that neither handle nor ignore it. The type
// parameter S is inferred: saga.NewFault[ChargeCard](m).
func NewFault[M, S any](m *Machine[S]) *Event[S, Fault[M]] {
	msgType := messageTypeFor[M]()
	if m.faults[msgType] != "" {
		panic(fmt.Sprintf("saga %s: faults of %q declared twice", m.name, msgType))
	}
	ev := bindEvent(m, FaultType(m.name, msgType), func(f Fault[M]) string { return f.SagaKey })
	if m.faults == nil {
		m.faults = map[string]string{}
	}
	m.faults[msgType] = ev.msgType
	return ev
}

// FaultFor returns the type of the fault event m receives when a message
// of type msgType it emitted is dead-lettered, or "" when m did not opt in
// with NewFault or NewRequest.
func (m *Machine[S]) FaultFor(msgType string) string { return m.faults[msgType] }

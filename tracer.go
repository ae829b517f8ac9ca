package idem

import (
	"context"

	"github.com/idemhq/idem/transport"
)

// Tracer receives the engine's work as it happens: units of work, the
// messages inside them and background passes. Set it in Config.Tracer; the
// otelidem package implements it with OpenTelemetry, and this package
// imports nothing of a tracing library. A nil Tracer costs a nil check.
// A Tracer may also be a SendTracer (sends) and a RequestTracer (the admin
// API's requests).
//
// Methods are called from the engine's goroutines, concurrently, and must
// not block. Every span returned is ended exactly once. The context a Start
// method returns is the one the engine passes on to the store, the
// transport, plain handlers and log lines while the span is open.
type Tracer interface {
	// StartUnitOfWork is called when a lane's unit of work begins, before
	// its first attempt. Its span ends after the last attempt: committed,
	// failed, or split into smaller units of work (which are then started
	// as units of work of their own, inside this one's context).
	StartUnitOfWork(ctx context.Context, u UnitOfWorkStart) (context.Context, UnitOfWorkSpan)
	// StartMessage is called for each message of each attempt of a unit of
	// work, in the unit of work's context, before the message is checked
	// against the inbox. Its span ends when the attempt's commit has
	// succeeded or failed, with the message's outcome in that attempt: a
	// message of an attempt that lost an optimistic-concurrency race ends
	// with OutcomeConflict, never OutcomeApplied.
	StartMessage(ctx context.Context, m MessageStart) (context.Context, MessageSpan)
	// StartBackground is called when a background pass begins (a relay,
	// timer, sweep or dead-letter replay pass, whether from the engine's
	// own loops or from RunTimers, RelayOutbox, Sweep and
	// ReplayDeadLetter).
	StartBackground(ctx context.Context, task BackgroundTask) (context.Context, BackgroundSpan)
}

// UnitOfWorkSpan is a unit of work's span (see Tracer.StartUnitOfWork).
type UnitOfWorkSpan interface {
	// End ends the span with what the unit of work did.
	End(UnitOfWorkEnd)
}

// MessageSpan is a message's span (see Tracer.StartMessage).
type MessageSpan interface {
	// TraceParent returns the span's W3C traceparent header value, which
	// every message or timer the message emits carries, unless the Tracer
	// is a SendTracer (each emission then carries its own send span's).
	// When it returns "", emissions copy the incoming message's
	// traceparent instead.
	TraceParent() string
	// End ends the span with the message's outcome.
	End(MessageEnd)
}

// BackgroundSpan is a background pass's span (see Tracer.StartBackground).
type BackgroundSpan interface {
	// End ends the span with what the pass did.
	End(BackgroundEnd)
}

// UnitOfWorkStart describes a unit of work as it begins.
type UnitOfWorkStart struct {
	// SagaType is the saga type of every message of the unit of work, or
	// "" when they have several (handlers count as "idem.handler").
	SagaType string
	// Messages is how many deliveries the unit of work holds.
	Messages int
	// TraceParents are the traceparent headers of its messages that carry
	// one: their creation contexts, which the unit of work's span links
	// to.
	TraceParents []string
	// Transport describes the transport the messages came from (see
	// transport.Describer). Tracers must not modify it.
	Transport *transport.Description
}

// Unit-of-work outcomes (UnitOfWorkEnd.Outcome).
const (
	// UnitCommitted: the unit of work committed and was settled.
	UnitCommitted = "committed"
	// UnitSplit: after a conflict or a failure, its messages were handed
	// to smaller units of work (one per key, or one per message).
	UnitSplit = "split"
	// UnitFailed: the store failed it; its messages went back to the
	// transport with backoff.
	UnitFailed = "failed"
	// UnitLeaseLost: the transport's lease ran out before the commit;
	// another consumer owns the messages.
	UnitLeaseLost = "lease_lost"
	// UnitStopped: the engine stopped while it waited to re-apply.
	UnitStopped = "stopped"
)

// UnitOfWorkEnd describes how a unit of work ended.
type UnitOfWorkEnd struct {
	// Outcome is one of UnitCommitted, UnitSplit, UnitFailed,
	// UnitLeaseLost and UnitStopped.
	Outcome string
	// Attempts is how many times the unit of work was applied (one plus
	// its conflicts).
	Attempts int
	// Err is why a unit of work did not commit; nil when it did.
	Err error
}

// MessageStart describes a message as an attempt of its unit of work
// begins to apply it.
type MessageStart struct {
	// SagaType is the consuming saga's type; "idem.handler" for a plain
	// handler; "" when the message is refused before a saga is known.
	SagaType string
	// Key is the canonical saga key (the message type, for a handler).
	Key string
	// MessageID is the message's dedup identity (its IdempotencyKey, or
	// its ID).
	MessageID string
	// Envelope is the delivered envelope. Tracers must not modify it.
	Envelope *Envelope
	// Attempt counts the transport's deliveries of the message, from 1.
	Attempt int
	// TraceParent is the envelope's W3C traceparent header: the message's
	// creation context (its send span), the parent of the message's span.
	// "" when it has none.
	TraceParent string
	// Transport describes the transport the message came from (see
	// transport.Describer). Tracers must not modify it.
	Transport *transport.Description
}

// Message outcomes (MessageEnd.Outcome), as the inbox and the saga decided.
const (
	// OutcomeApplied: a transition or a handler ran and committed.
	OutcomeApplied = "applied"
	// OutcomeDuplicate: the inbox held the message; it was skipped.
	OutcomeDuplicate = "duplicate"
	// OutcomeIgnored: the saga ignored it in its state, or it was a stale
	// timer.
	OutcomeIgnored = "ignored"
	// OutcomeNotFound: no saga for its key, and it cannot start one.
	OutcomeNotFound = "not_found"
	// OutcomeDeadLettered: recorded as a dead letter (MessageEnd.Reason
	// says why).
	OutcomeDeadLettered = "dead_lettered"
	// OutcomeRetried: returned to the transport for another try.
	OutcomeRetried = "retried"
	// OutcomeConflict: the attempt lost an optimistic-concurrency race and
	// was rolled back; another attempt follows.
	OutcomeConflict = "conflict"
	// OutcomeFailed: the unit of work's commit failed (or its outcome is
	// unknown); what was decided for the message was rolled back.
	OutcomeFailed = "failed"
)

// MessageEnd describes a message's outcome in one attempt.
type MessageEnd struct {
	// Outcome is one of the Outcome constants.
	Outcome string
	// From and To are the saga's states before and after an applied
	// transition; empty otherwise.
	From, To string
	// Reason is the dead-letter reason (a Reason constant) of a
	// dead-lettered message.
	Reason string
	// Err is the dead letter's error, or the failed commit's.
	Err error
}

// BackgroundTask names a background pass.
type BackgroundTask string

// Background passes.
const (
	TaskRelay  BackgroundTask = "relay"
	TaskTimers BackgroundTask = "timers"
	TaskSweep  BackgroundTask = "sweep"
	TaskReplay BackgroundTask = "replay_dead_letter"
)

// BackgroundEnd describes how a background pass ended.
type BackgroundEnd struct {
	// Items is how many rows the pass handled: messages relayed, timers
	// fired, rows swept, dead letters replayed.
	Items int
	// Err is the pass's error; nil on success.
	Err error
}

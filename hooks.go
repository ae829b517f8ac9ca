package idem

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	"github.com/idemhq/idem/store"
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

// runLane runs one unit of work (see runUnit) inside a unit-of-work span
// when a Tracer is set.
func (e *Engine) runLane(ctx context.Context, items []*item) UnitOfWorkEnd {
	t := e.cfg.Tracer
	if t == nil {
		return e.runUnit(ctx, items)
	}
	ctx, span := t.StartUnitOfWork(ctx, e.trace.uowStart(items))
	end := e.runUnit(ctx, items)
	span.End(end)
	return end
}

func commonType(items []*item) string {
	typ := items[0].typ
	for _, it := range items[1:] {
		if it.typ != typ {
			return ""
		}
	}
	return typ
}

// noBackground ends no span.
func noBackground(int, error) {}

// background starts a background pass's span; the function returned ends
// it.
func (e *Engine) background(ctx context.Context, task BackgroundTask) (context.Context, func(n int, err error)) {
	t := e.cfg.Tracer
	if t == nil {
		return ctx, noBackground
	}
	ctx, span := t.StartBackground(ctx, task)
	return ctx, func(n int, err error) { span.End(BackgroundEnd{Items: n, Err: err}) }
}

// openSpan is a message span waiting for its attempt's commit.
type openSpan struct {
	span MessageSpan
	end  MessageEnd
}

// applyObserved applies one item and records its outcome: in the lane's
// per-type counts, always, and in a message span when a Tracer is set.
// While the item is applied, l.ctx is its span's context, so that a plain
// handler and the log lines about the item see the span.
func (l *lane) applyObserved(it *item) {
	res := l.res
	before := res.counts
	nacks, journal, dead := len(res.nacks), len(l.ch.Journal), len(l.ch.DeadLetters)
	var span MessageSpan
	if t := l.e.cfg.Tracer; t != nil {
		tp := it.d.Envelope.Headers[transport.HeaderTraceParent]
		ctx, s := t.StartMessage(l.ctx, MessageStart{
			SagaType: it.typ, Key: it.key, MessageID: it.msgID, Envelope: &it.d.Envelope,
			Attempt: it.d.Attempt, TraceParent: tp, Transport: &l.e.trace.desc,
		})
		span = s
		if l.e.trace.send == nil {
			it.tp = s.TraceParent() // what emissions carry
		}
		saved := l.ctx
		l.ctx = ctx
		defer func() { l.ctx = saved }()
	}
	l.apply(it)

	var end MessageEnd
	c := &res.counts
	switch {
	case c.dead > before.dead:
		end.Outcome = OutcomeDeadLettered
		if len(l.ch.DeadLetters) > dead {
			d := l.ch.DeadLetters[len(l.ch.DeadLetters)-1]
			end.Reason = d.Reason
			if span != nil {
				end.Err = deadLetterError(d.Error)
			}
		}
	case c.dup > before.dup:
		end.Outcome = OutcomeDuplicate
	case c.applied > before.applied:
		end.Outcome = OutcomeApplied
		if len(l.ch.Journal) > journal {
			j := &l.ch.Journal[len(l.ch.Journal)-1]
			end.From, end.To = j.FromState, j.ToState
		}
	case c.ignored > before.ignored:
		end.Outcome = OutcomeIgnored
	case c.notFound > before.notFound:
		end.Outcome = OutcomeNotFound
	case len(res.nacks) > nacks:
		end.Outcome = OutcomeRetried
	}
	l.countOutcome(it, end.Outcome, end.Reason)
	if span != nil {
		l.spans = append(l.spans, openSpan{span: span, end: end})
	}
}

// endSpans ends the attempt's message spans, and the send spans of their
// emissions, once its commit returned err.
func (l *lane) endSpans(err error) {
	for _, s := range l.sends {
		s.End(err)
	}
	l.sends = nil
	for _, s := range l.spans {
		end := s.end
		if err != nil {
			end = MessageEnd{Outcome: OutcomeFailed, Err: err}
			if errors.Is(err, store.ErrConflict) {
				end.Outcome = OutcomeConflict
			}
		}
		s.span.End(end)
	}
	l.spans = nil
}

type deadLetterError string

func (d deadLetterError) Error() string { return string(d) }

// TypeStats are cumulative counters of one saga type (or "idem.handler"
// for plain handlers) since the engine was created. Messages refused before
// their saga was known (unknown type, malformed body) count under "".
type TypeStats struct {
	// Applied, Ignored, Duplicates, NotFound and Retried count committed
	// messages by outcome (see the Outcome constants).
	Applied, Ignored, Duplicates, NotFound, Retried int64
	// DeadLetters counts dead-lettered messages by reason (a Reason
	// constant). Nil when there were none.
	DeadLetters map[string]int64
	// Conflicts counts units of work holding messages of the type that
	// lost an optimistic-concurrency race.
	Conflicts int64
	// LeaseLost counts messages whose transport lease ran out before their
	// unit of work committed; the transport hands them out again.
	LeaseLost int64
	// Redelivered counts committed messages that were delivered more than
	// once (Delivery.Attempt > 1).
	Redelivered int64
	// NonCanonicalKeys counts applied messages whose raw correlation key
	// differed from its canonical form (another Unicode normalisation, say).
	NonCanonicalKeys int64
}

// typeCounters are one type's live counters.
type typeCounters struct {
	applied, ignored, dup, notFound, retried, conflicts, leaseLost, redelivered, rawKeys atomic.Int64
	dead                                                                                 sync.Map // reason → *atomic.Int64
}

// typeDelta is what one committed unit of work adds to one type's counters.
type typeDelta struct {
	applied, ignored, dup, notFound, retried, redelivered, rawKeys int64
	dead                                                           map[string]int64
}

func (l *lane) countOutcome(it *item, outcome, reason string) {
	if l.res.byType == nil {
		l.res.byType = map[string]*typeDelta{}
	}
	d := l.res.byType[it.typ]
	if d == nil {
		d = &typeDelta{}
		l.res.byType[it.typ] = d
	}
	if it.d.Attempt > 1 {
		d.redelivered++
	}
	switch outcome {
	case OutcomeApplied:
		d.applied++
		if it.m != nil && it.rawKey != it.key {
			d.rawKeys++
		}
	case OutcomeDuplicate:
		d.dup++
	case OutcomeIgnored:
		d.ignored++
	case OutcomeNotFound:
		d.notFound++
	case OutcomeRetried:
		d.retried++
	case OutcomeDeadLettered:
		if d.dead == nil {
			d.dead = map[string]int64{}
		}
		d.dead[reason]++
	}
}

func (e *Engine) typeCounters(typ string) *typeCounters {
	if c, ok := e.byType.Load(typ); ok {
		return c.(*typeCounters)
	}
	c, _ := e.byType.LoadOrStore(typ, &typeCounters{})
	return c.(*typeCounters)
}

// addTypeCounts adds a committed unit of work's per-type counts.
func (e *Engine) addTypeCounts(byType map[string]*typeDelta) {
	for typ, d := range byType {
		c := e.typeCounters(typ)
		c.applied.Add(d.applied)
		c.ignored.Add(d.ignored)
		c.dup.Add(d.dup)
		c.notFound.Add(d.notFound)
		c.retried.Add(d.retried)
		c.redelivered.Add(d.redelivered)
		c.rawKeys.Add(d.rawKeys)
		for reason, n := range d.dead {
			v, ok := c.dead.Load(reason)
			if !ok {
				v, _ = c.dead.LoadOrStore(reason, new(atomic.Int64))
			}
			v.(*atomic.Int64).Add(n)
		}
	}
}

// countPerType adds one to the counter picked by field for every distinct
// type among items.
func (e *Engine) countPerType(items []*item, field func(*typeCounters) *atomic.Int64, perItem bool) {
	if perItem {
		for _, it := range items {
			field(e.typeCounters(it.typ)).Add(1)
		}
		return
	}
	seen := make(map[string]bool, 1)
	for _, it := range items {
		if !seen[it.typ] {
			seen[it.typ] = true
			field(e.typeCounters(it.typ)).Add(1)
		}
	}
}

func (e *Engine) countConflict(items []*item) {
	e.countPerType(items, func(c *typeCounters) *atomic.Int64 { return &c.conflicts }, false)
}

func (e *Engine) countLeaseLost(items []*item) {
	e.countPerType(items, func(c *typeCounters) *atomic.Int64 { return &c.leaseLost }, true)
}

// TypeStats returns a snapshot of the engine's counters by saga type. It
// is safe for concurrent use; each type's counters are read one by one,
// so a snapshot taken during a commit may hold part of it.
func (e *Engine) TypeStats() map[string]TypeStats {
	out := map[string]TypeStats{}
	e.byType.Range(func(k, v any) bool {
		c := v.(*typeCounters)
		s := TypeStats{
			Applied: c.applied.Load(), Ignored: c.ignored.Load(), Duplicates: c.dup.Load(), NotFound: c.notFound.Load(),
			Retried: c.retried.Load(), Conflicts: c.conflicts.Load(), LeaseLost: c.leaseLost.Load(),
			Redelivered: c.redelivered.Load(), NonCanonicalKeys: c.rawKeys.Load(),
		}
		c.dead.Range(func(r, n any) bool {
			if s.DeadLetters == nil {
				s.DeadLetters = map[string]int64{}
			}
			s.DeadLetters[r.(string)] = n.(*atomic.Int64).Load()
			return true
		})
		out[k.(string)] = s
		return true
	})
	return out
}

// sagaTypes lists the distinct saga types of items, for Observation.
func sagaTypes(items []*item) []string {
	var out []string
	for _, it := range items {
		if !containsString(out, it.typ) {
			out = append(out, it.typ)
		}
	}
	return out
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Transport returns the engine's transport, for operators' tools that ask
// it optional questions (transport.PendingCounter for the queue depth).
func (e *Engine) Transport() transport.Transport { return e.tr }

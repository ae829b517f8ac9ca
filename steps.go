package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/journal"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// The per-message steps, in the order a message meets them in its lane:
//
//  1. bad input: dead-lettered with its reason (decided by the planner);
//  2. dedup: the inbox, the batch and the dedup token (skipped as a
//     duplicate);
//  3. a plain handler, run once per delivery (applyHandler);
//  4. key order: a message of a key whose earlier message goes back to
//     the transport goes back too;
//  5. the saga (applySaga): timer staleness, the transition with its
//     domain statements, emissions with their IDs, request IDs and tokens,
//     the instance and its timers, the journal and the inbox record.
//
// Each step returns the message's outcome. A new per-message concern is a
// step here.

// runSteps takes every item of the lane through the steps, in order, each
// inside its message span when a Tracer is set, and records its outcome.
func runSteps(ctx context.Context, l *lane, items []*item) {
	for _, it := range items {
		mctx := ctx
		if t := l.cfg.Tracer; t != nil {
			var span MessageSpan
			mctx, span = l.trace.startMessage(ctx, it)
			l.res.att.spans = append(l.res.att.spans, span)
		}
		began := time.Now()
		l.res.att.results = append(l.res.att.results, result{it: it, o: applyItem(mctx, l, it)})
		if took := time.Since(began); took > l.slowestTook {
			l.slowest, l.slowestTook = it, took
		}
	}
}

// applyItem takes one item through the steps and returns its outcome.
func applyItem(ctx context.Context, l *lane, it *item) outcome {
	l.noteReplay(it)
	if it.reason != "" && !it.late {
		return l.deadLetter(ctx, it, it.reason, it.badErr)
	}
	ik := it.inboxKey()
	if l.seen(ik) {
		l.ack(it)
		return outcome{kind: OutcomeDuplicate}
	}
	if it.reason != "" { // late: decided after a failed unit of work
		return l.deadLetter(ctx, it, it.reason, it.badErr)
	}
	if it.h != nil {
		return applyHandler(ctx, l, it, ik)
	}
	if delay, ok := l.blocked[it.sagaKey()]; ok {
		// An earlier message of this key failed: keep arrival order by
		// returning this one too, unapplied.
		l.res.nacks = append(l.res.nacks, nackReq{d: it.d, delay: delay})
		return outcome{kind: OutcomeRetried}
	}
	w := l.work[it.sagaKey()]
	if w == nil {
		w = &working{inst: l.loaded.Instances[it.sagaKey()]}
		l.work[it.sagaKey()] = w
	}
	return applySaga(ctx, l, w, it, ik)
}

// applyHandler runs a plain handler. Its outcome is kept on the item: when
// its unit of work is applied again (after a conflict, or one message at a
// time), the handler's side effects already happened, so it does not run
// again.
func applyHandler(ctx context.Context, l *lane, it *item, ik store.InboxKey) outcome {
	if !it.ran {
		it.ran, it.handlerErr = true, runHandler(ctx, it)
	}
	if err := it.handlerErr; err != nil {
		return l.fail(ctx, it, err)
	}
	l.markSeen(ik)
	l.ack(it)
	return outcome{kind: OutcomeApplied}
}

// runHandler runs a plain handler, turning a panic into a permanent error.
func runHandler(ctx context.Context, it *item) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = Permanent(fmt.Errorf("handler for %s panicked: %v", it.d.Envelope.Type, p))
		}
	}()
	return it.h(ctx, it.d.Envelope)
}

// ownTimer is the name of the timer env is, when this item's saga
// scheduled it; "" otherwise. A timer that correlates to another saga is
// an ordinary message there.
func ownTimer(it *item) string {
	env := &it.d.Envelope
	if env.Headers[transport.HeaderSagaType] == it.typ && env.Headers[transport.HeaderSagaKey] == it.key {
		return env.Headers[transport.HeaderTimer]
	}
	return ""
}

// applySaga applies one message to its saga within the lane's unit of
// work.
func applySaga(ctx context.Context, l *lane, w *working, it *item, ik store.InboxKey) outcome {
	env := &it.d.Envelope
	start := l.cfg.Clock()
	timerName := ownTimer(it)
	if timerName != "" && (w.inst == nil || w.inst.Timers[timerName] != env.ID) {
		// Unscheduled or rescheduled meanwhile: harmless by construction.
		if w.inst != nil {
			l.markSeen(ik)
		}
		l.ack(it)
		return outcome{kind: OutcomeIgnored, stale: true}
	}
	in := saga.Input{Msg: it.msg, MsgType: env.Type, Key: it.key, MessageID: it.msgID, Now: l.now, CausationID: env.CausationID}
	if w.inst != nil {
		in.Exists, in.State, in.Data, in.SchemaVersion = true, saga.State(w.inst.State), w.inst.Data, w.inst.SchemaVersion
		in.Timers, in.Finished = w.inst.Timers, !w.inst.FinishedAt.IsZero()
	}
	mt := l.messageTx(ctx, &in) // the handler's SQL: kept below when applied
	defer mt.undo(ctx)
	r, err := it.m.Apply(in)
	if err != nil {
		return l.fail(ctx, it, err)
	}
	switch r.Outcome {
	case saga.NotFound:
		if it.m.NotFound() == saga.NotFoundDeadLetter {
			return l.deadLetter(ctx, it, ReasonNotFound, fmt.Errorf("no saga %s/%s and %s cannot start one", it.typ, it.key, env.Type))
		}
		l.ack(it)
		return outcome{kind: OutcomeNotFound}
	case saga.Ignored:
		if timerName != "" {
			delete(w.inst.Timers, timerName)
			w.changed = true
		}
		l.markSeen(ik)
		l.ack(it)
		return outcome{kind: OutcomeIgnored, stale: r.Stale} // stale: a request's late or superseded outcome
	}
	// Applied: encode everything first, so an encoding failure leaves no trace.
	out, sched, err := l.emit.encode(it, &r, l.now)
	if err != nil {
		return l.fail(ctx, it, Permanent(err))
	}
	if !r.MigrationOnly { // the handler's SQL of an event that applied nothing is undone
		if err := mt.keep(ctx); err != nil {
			return l.fail(ctx, it, err)
		}
	}
	var stored []byte // the state document before the step, for the migration's journal entry
	if w.inst != nil {
		stored = w.inst.Data
	}
	from, to, version := transition(l, w, it, &r, timerName, sched)
	if r.MigratedFrom != "" {
		from = l.journalMigration(it, env, &r, version, stored)
	}
	if r.MigrationOnly {
		l.markSeen(ik)
		l.ack(it)
		return outcome{kind: OutcomeIgnored, stale: r.Stale}
	}
	l.ch.Journal = append(l.ch.Journal, store.JournalEntry{
		SagaType: it.typ, Key: it.key, RawKey: it.rawKey, MessageID: it.msgID, EventType: env.Type,
		FromState: from, ToState: to, Version: version, At: l.now,
		JournalDetail: journal.Detail(&journal.Step{Msg: env, After: r.Data, Emitted: out,
			Duration: l.cfg.Clock().Sub(start), Limit: l.cfg.JournalPayloadLimit}),
	})
	for i := range out {
		l.traceSends(ctx, &out[i])
	}
	for i := range sched {
		l.traceSends(ctx, &sched[i].Envelope)
	}
	l.markSeen(ik)
	l.emitted(out)
	l.ack(it)
	for _, rec := range r.Logs {
		l.res.logs = append(l.res.logs, logLine{it: it, rec: rec})
	}
	return outcome{kind: OutcomeApplied, from: from, to: to, emitted: len(out)}
}

// transition writes an applied result into the saga's instance and the
// lane's timers, and returns the journal's states and version.
func transition(l *lane, w *working, it *item, r *saga.Result, timerName string, sched []store.Timer) (from, to string, version int64) {
	now := l.now
	if w.inst == nil {
		w.inst = &store.Instance{SagaType: it.typ, Key: it.key, Version: 1, CreatedAt: now}
		w.isNew = true
	}
	inst := w.inst
	from = inst.State
	inst.State, inst.Data, inst.SchemaVersion, inst.UpdatedAt = string(r.To), r.Data, r.SchemaVersion, now
	inst.Attributes = r.Attributes
	switch {
	case r.Finished && inst.FinishedAt.IsZero():
		inst.FinishedAt = now
	case !r.Finished:
		inst.FinishedAt = time.Time{}
	}
	if timerName != "" {
		delete(inst.Timers, timerName)
	}
	for _, name := range r.Unscheduled {
		delete(inst.Timers, name)
		l.timers[store.TimerKey{SagaType: it.typ, Key: it.key, Name: name}] = nil
	}
	for i := range sched {
		if inst.Timers == nil {
			inst.Timers = map[string]string{}
		}
		inst.Timers[sched[i].Name] = sched[i].Envelope.ID
		l.timers[store.TimerKey{SagaType: it.typ, Key: it.key, Name: sched[i].Name}] = &sched[i]
	}
	w.changed = true
	version = inst.Version
	if !w.isNew {
		version++
	}
	if from == "" {
		from = string(saga.Initial)
	}
	return from, inst.State, version
}

// journalMigration records in the saga's journal the declared migration
// Apply made before the event (saga.Machine.MigrateState): from the stored
// state to the one the event applied in, which it returns. The entry
// carries the stored document, so that the history computes the next
// step's change from it.
func (l *lane) journalMigration(it *item, env *transport.Envelope, r *saga.Result, version int64, stored []byte) string {
	l.ch.Journal = append(l.ch.Journal, store.JournalEntry{
		SagaType: it.typ, Key: it.key, RawKey: it.rawKey, MessageID: it.msgID, EventType: saga.MigrationEvent,
		FromState: string(r.MigratedFrom), ToState: string(r.From), Version: version, At: l.now,
		JournalDetail: journal.Detail(&journal.Step{Msg: env, After: stored, Limit: l.cfg.JournalPayloadLimit}),
	})
	return string(r.From)
}

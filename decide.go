package idem

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// The per-message decisions of a lane: what becomes of a message that
// failed (fail: retry with backoff or dead-letter), given back (giveBack,
// which holds back the later messages of its key), or dead-lettered
// (deadLetter, with its fault message); its retry record (noteRetry,
// clearRetries); and the replays of dead letters it settles (noteReplay,
// consumedReplays). They write what they decide into the lane's change
// buffer (changes.go).

// noteReplay remembers an item that replays a dead letter (the header
// store.HeaderReplay), when the store keeps replays.
func (l *lane) noteReplay(it *item) {
	if l.caps.replayer != nil && it.d.Envelope.Headers[store.HeaderReplay] != "" {
		l.replays = append(l.replays, it)
	}
}

// consumedReplays lists the dead letters whose replayed copies this unit
// of work settles without dead-lettering them again: their replays
// succeeded, or, for the copies skipped as duplicates (dup: an earlier
// copy of the message was applied), applied nothing.
func (l *lane) consumedReplays() (ok, dup []string) {
	if len(l.replays) == 0 {
		return nil, nil
	}
	dead := map[string]bool{}
	for _, d := range l.ch.DeadLetters {
		dead[d.ID] = true
	}
	acked := map[string]bool{}
	for _, d := range l.res.acks {
		acked[d.Envelope.ID] = true
	}
	kinds := make(map[*item]string, len(l.res.att.results))
	for _, r := range l.res.att.results {
		kinds[r.it] = r.o.kind
	}
	for _, it := range l.replays {
		if acked[it.d.Envelope.ID] && !dead[it.msgID] {
			if kinds[it] == OutcomeDuplicate {
				dup = append(dup, it.msgID)
			} else {
				ok = append(ok, it.msgID)
			}
			dead[it.msgID] = true // once
		}
	}
	return ok, dup
}

// settleParams settles the replays of ids with outcome at the lane's
// time; nil when there are none.
func (l *lane) settleParams(ids []string, outcome store.ReplayOutcome) *store.SettleReplaysParams {
	if len(ids) == 0 {
		return nil
	}
	return &store.SettleReplaysParams{IDs: ids, Outcome: outcome, At: l.now}
}

// fail classifies a handler error: permanent errors are dead-lettered at
// once, transient ones (and a saga in a state this build does not know)
// returned to the transport with backoff until Config.MaxAttempts. Work
// interrupted by Stop is always returned, never dead-lettered. A returned message blocks the later messages of its key
// in this unit of work.
func (l *lane) fail(ctx context.Context, it *item, err error) outcome {
	reason := ""
	switch {
	case ctx.Err() != nil:
		l.giveBack(it, 0)
		return outcome{kind: OutcomeRetried}
	case errors.Is(err, saga.ErrUnknownState):
		// Another definition wrote the saga: give the message back for a
		// replica that knows its state (docs/deploys.md, "Mixed fleets").
		if it.d.Attempt >= l.cfg.MaxAttempts {
			reason = ReasonUnknownState
		}
	case errors.Is(err, saga.ErrUnhandled):
		reason = ReasonUnhandled
	case errors.Is(err, saga.ErrSchema):
		reason = ReasonSchema
	case errors.Is(err, saga.ErrAttribute):
		reason = ReasonInvalidAttribute
	case errors.Is(err, saga.ErrMalformed):
		reason = ReasonMalformed
	case errors.Is(err, saga.ErrPanic), IsPermanent(err):
		reason = ReasonPermanent
	case it.d.Attempt >= l.cfg.MaxAttempts:
		reason = ReasonRetriesExhausted
	}
	if reason != "" {
		return l.deadLetter(ctx, it, reason, err)
	}
	delay, ok := retryDelay(err)
	if !ok {
		delay = l.retry.Delay(it.d.Attempt)
	}
	l.log.WarnContext(ctx, "message failed; will retry", logSagaType, it.typ, logSagaKey, it.key, logMessageID, it.msgID,
		logAttempt, it.d.Attempt, "retry_in", delay, "error", err)
	l.giveBack(it, delay)
	l.noteRetry(it, delay, err)
	return outcome{kind: OutcomeRetried}
}

// noteRetry records the retry state of it, given back after delay
// because of err, in the unit of work's commit (Changes.RecordRetries):
// the row and the message's return land together, so a redelivery that
// succeeds always finds the row to clear, and a unit of work that does not
// commit records nothing. Only on failure, so a message that succeeds at
// once costs nothing.
func (l *lane) noteRetry(it *item, delay time.Duration, err error) {
	if l.caps.retries == nil {
		return
	}
	l.ch.RecordRetries = append(l.ch.RecordRetries, store.Retry{
		ID: it.msgID, SagaType: it.typ, Key: it.key, MessageID: it.d.Envelope.ID, MessageType: it.d.Envelope.Type,
		Attempts: max(it.d.Attempt, 1), Error: store.RetryText(err.Error()),
		FirstFailedAt: l.now, LastFailedAt: l.now, NextAttemptAt: l.now.Add(delay),
		Envelope: &it.d.Envelope, // kept on failure only: "retry now" publishes it again
	})
}

// clearRetries lists the retry states this unit of work ends: those of
// the messages it settles after an earlier failed delivery (Attempt > 1),
// of the messages it dead-letters (the dead letter supersedes its retry),
// and of copies an operator sent (a "retry now" copy arrives at Attempt 1
// while the original still waits out its backoff). Any other message
// settled at its first delivery adds nothing.
func (l *lane) clearRetries() []string {
	if l.caps.retries == nil {
		return nil
	}
	var ids []string
	for _, r := range l.res.att.results {
		if r.o.kind != OutcomeRetried && (r.it.d.Attempt > 1 || r.o.kind == OutcomeDeadLettered || r.it.d.Envelope.Headers[transport.HeaderActor] != "") {
			ids = append(ids, r.it.msgID)
		}
	}
	return ids
}

// giveBack returns it to the transport after delay; the later messages of a
// saga's key in this unit of work follow it, unapplied (keepOrder).
func (l *lane) giveBack(it *item, delay time.Duration) {
	l.res.nacks = append(l.res.nacks, nackReq{d: it.d, delay: delay})
	if it.h == nil && it.m != nil {
		l.blocked[it.sagaKey()] = delay
	}
}

// deadLetter records it as a dead letter with reason, and its fault
// message when its saga asked for one (saga.Request).
func (l *lane) deadLetter(ctx context.Context, it *item, reason string, err error) outcome {
	text := storableText(err.Error())
	l.ch.DeadLetters = append(l.ch.DeadLetters, store.DeadLetter{
		ID: it.msgID, Envelope: it.d.Envelope, Reason: reason, Error: text,
		SagaType: it.typ, Key: it.key, Attempts: max(it.d.Attempt, 1), FirstFailedAt: l.now, LastFailedAt: l.now,
	})
	l.ack(it)
	o := outcome{kind: OutcomeDeadLettered, reason: reason, err: deadLetterError(text)}
	if env, ok := l.emit.fault(&it.d.Envelope, reason, text, l.now); ok {
		l.traceSends(ctx, &env)
		l.ch.Outbox = append(l.ch.Outbox, store.OutboxMessage{Envelope: env, CreatedAt: l.now})
		l.res.outbox = append(l.res.outbox, env)
		o.emitted = 1
	}
	l.res.logs = append(l.res.logs, logLine{it: it, rec: saga.LogRecord{Level: slog.LevelWarn, Msg: "message dead-lettered", Args: []any{logReason, reason, "error", err.Error()}}})
	return o
}

// deadLetterError is a dead letter's error as stored, for its span.
type deadLetterError string

func (d deadLetterError) Error() string { return string(d) }

// collect turns what the unit of work decided into changes: the retry
// records it ends, the replays it settles, and the working instances and
// timers.
func (l *lane) collect() {
	l.ch.ClearRetries = l.clearRetries()
	// Settled in the commit: a crash after it cannot leave them pending.
	ok, dup := l.consumedReplays()
	l.ch.SettleReplays = l.settleParams(ok, store.ReplaySucceeded)
	l.ch.SettleDuplicates = l.settleParams(dup, store.ReplayDuplicate)
	l.collectWork()
}

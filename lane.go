package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

type nackReq struct {
	d     transport.Delivery
	delay time.Duration
}

type logLine struct {
	it  *item
	rec saga.LogRecord
}

// laneResult is what a committed unit of work leaves to do: the settle
// part's input (settle.go).
type laneResult struct {
	acks   []transport.Delivery
	nacks  []nackReq
	outbox []Envelope
	logs   []logLine
	att    *attempt // what it decided, for the observers
	// returned counts the deliveries a claimed unit of work returned to
	// the queue in its commit (not nacked after it).
	returned int
}

// working is an instance as the lane's unit of work changes it.
type working struct {
	inst    *store.Instance // nil: no saga
	isNew   bool
	changed bool
}

// lane is one attempt of a unit of work in the making: the batch's items
// of one lane, what the store loaded for them, and the changes and results
// the per-message steps (steps.go) build. Its life is load, the steps of
// each item in order, collect, commit; the units (unit.go) run it.
type lane struct {
	*base
	emit    emitter
	now     time.Time
	loaded  *store.LoadResult
	res     *laneResult
	ch      *store.Changes
	work    map[store.Key]*working
	timers  map[store.TimerKey]*store.Timer // nil value: cancel
	inBatch map[store.InboxKey]bool
	blocked map[store.Key]time.Duration // keys with a message to retry
	uow     store.UnitOfWork
	tokens  map[store.InboxKey]string // token of each tokened message
	claimed map[string]bool           // tokens this unit of work claims
	replays []*item                   // items that replay a dead letter
	// slowest is the item whose steps took longest, and how long.
	slowest     *item
	slowestTook time.Duration
}

func newLane(b *base, emit emitter, items []*item) *lane {
	return &lane{
		base: b, emit: emit, now: b.cfg.Clock(), loaded: &store.LoadResult{},
		res: &laneResult{att: &attempt{items: items, results: make([]result, 0, len(items))}}, ch: &store.Changes{},
		work: map[store.Key]*working{}, timers: map[store.TimerKey]*store.Timer{},
		inBatch: map[store.InboxKey]bool{}, blocked: map[store.Key]time.Duration{},
	}
}

// readInbox loads the items' inbox records in a unit of work of its own,
// rolled back at once.
func (l *lane) readInbox(ctx context.Context, items []*item) error {
	uow, err := l.store.Begin(ctx)
	if err != nil {
		return &beginError{err}
	}
	defer func() { _ = uow.Rollback(ctx) }()
	return l.load(ctx, uow, items)
}

// load reads, in one call, every saga and inbox record the items touch.
func (l *lane) load(ctx context.Context, uow store.UnitOfWork, items []*item) error {
	p := &store.LoadParams{}
	seenKey := map[store.Key]bool{}
	for _, it := range items {
		if it.reason != "" && !it.late {
			continue
		}
		if it.h == nil && !seenKey[it.sagaKey()] {
			seenKey[it.sagaKey()] = true
			p.Keys = append(p.Keys, it.sagaKey())
		}
		p.Inbox = append(p.Inbox, it.inboxKey())
		if tok := l.itemToken(it); tok != "" {
			if l.tokens == nil {
				l.tokens = map[store.InboxKey]string{}
			}
			l.tokens[it.inboxKey()] = tok
			p.Tokens = append(p.Tokens, tok)
		}
	}
	if len(p.Inbox) == 0 {
		return nil
	}
	loaded, err := uow.Load(ctx, p)
	if err != nil {
		return fmt.Errorf("load %d sagas: %w", len(p.Keys), err)
	}
	l.loaded = loaded
	return nil
}

// itemToken is the dedup token a tokened message must find unclaimed
// (Config.Dedup), or "".
func (l *lane) itemToken(it *item) string {
	if l.caps.tokens == nil || !tokened(&it.d.Envelope) {
		return ""
	}
	return TokenID(&it.d.Envelope)
}

// seen reports whether the message of ik was applied before: its inbox
// record exists, it came twice in this unit of work, or its token was
// claimed or never minted.
func (l *lane) seen(ik store.InboxKey) bool {
	if l.loaded.Seen[ik] || l.inBatch[ik] {
		return true
	}
	tok, ok := l.tokens[ik]
	return ok && (!l.loaded.Tokens[tok] || l.claimed[tok])
}

// markSeen records the message of ik in the inbox, and claims its token.
func (l *lane) markSeen(ik store.InboxKey) {
	if tok, ok := l.tokens[ik]; ok && !l.claimed[tok] {
		if l.claimed == nil {
			l.claimed = map[string]bool{}
		}
		l.claimed[tok] = true
		l.ch.ClaimTokens = append(l.ch.ClaimTokens, tok)
	}
	l.inBatch[ik] = true
	l.ch.Inbox = append(l.ch.Inbox, store.InboxEntry{InboxKey: ik, ProcessedAt: l.now})
}

// ack settles it as done in this unit of work.
func (l *lane) ack(it *item) { l.res.acks = append(l.res.acks, it.d) }

// emitted adds a transition's emissions to the outbox, minting their
// tokens with Config.Dedup token.
func (l *lane) emitted(out []Envelope) {
	if l.cfg.Dedup == DedupToken {
		for i := range out {
			out[i].Headers[transport.HeaderToken] = "1"
			l.ch.MintTokens = append(l.ch.MintTokens, store.Token{ID: TokenID(&out[i]), MintedAt: l.now})
		}
	}
	for _, o := range out {
		l.ch.Outbox = append(l.ch.Outbox, store.OutboxMessage{Envelope: o, CreatedAt: l.now})
	}
	l.res.outbox = append(l.res.outbox, out...)
}

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

// messageTx opens the scope of one message's domain statements in the
// unit of work (store.DomainTxUnitOfWork): in.Tx and in.Ctx are set, and
// the statements are kept only if the transition applies. nil when the
// store has no domain transactions.
func (l *lane) messageTx(ctx context.Context, in *saga.Input) *msgScope {
	d, ok := domainTxUnit(l.uow)
	if !ok {
		return nil
	}
	mt := d.MessageTx(ctx)
	in.Tx, in.Ctx = mt.Handle(), ctx
	return &msgScope{mt: mt}
}

// traceSends starts the send spans of a transition's emissions, in the
// applied message's span, and writes their trace context into the
// envelopes before the unit of work stores them. The spans end with the
// commit (tracerObserver).
func (l *lane) traceSends(ctx context.Context, envs ...*Envelope) {
	if l.trace.send == nil {
		return
	}
	for _, env := range envs {
		l.res.att.sends = append(l.res.att.sends, l.trace.startEmission(ctx, env))
	}
}

// collect turns the working instances and timers into changes.
func (l *lane) collect() {
	l.ch.ClearRetries = l.clearRetries()
	// Settled in the commit: a crash after it cannot leave them pending.
	ok, dup := l.consumedReplays()
	l.ch.SettleReplays = l.settleParams(ok, store.ReplaySucceeded)
	l.ch.SettleDuplicates = l.settleParams(dup, store.ReplayDuplicate)
	for _, w := range l.work {
		switch {
		case w.isNew:
			l.ch.Inserts = append(l.ch.Inserts, w.inst)
		case w.changed:
			l.ch.Updates = append(l.ch.Updates, w.inst)
		}
	}
	for k, t := range l.timers {
		if t == nil {
			l.ch.CancelTimers = append(l.ch.CancelTimers, k)
		} else {
			l.ch.Timers = append(l.ch.Timers, *t)
		}
	}
}

// returnRetries returns the messages to retry to the queue in the claimed
// unit of work that commits the rest, with the backoff a Nack would give.
func (l *lane) returnRetries(ctx context.Context, claim store.ClaimUnitOfWork) error {
	for _, n := range l.res.nacks {
		if err := claim.Return(ctx, n.d, n.delay); err != nil {
			return err
		}
	}
	l.res.returned, l.res.nacks = len(l.res.nacks), nil
	return nil
}

// commit writes the changes (on the store's own queue, with the
// deliveries' consumption and the emitted messages). A commit error that
// leaves the outcome unknown is returned as an *uncertainCommit.
func (l *lane) commit(ctx context.Context, n int) (*laneResult, error) {
	res, ch := l.res, l.ch
	if q, ok := queueUnit(l.uow); ok && l.caps.queue {
		if err := q.Consume(ctx, res.acks); err != nil {
			return nil, fmt.Errorf("consume %d deliveries: %w", len(res.acks), err)
		}
		if len(res.outbox) > 0 {
			if err := q.Enqueue(ctx, res.outbox); err != nil {
				return nil, fmt.Errorf("enqueue %d messages: %w", len(res.outbox), err)
			}
		}
		res.acks, res.outbox = nil, nil
		ch.Outbox = nil
	} else if ch.Empty() {
		return res, nil
	}
	if err := l.uow.Commit(ctx, ch); err != nil {
		err = fmt.Errorf("commit %d messages: %w", n, err)
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrRejected) || errors.Is(err, transport.ErrLeaseLost) || ctx.Err() != nil {
			return nil, err
		}
		uc := &uncertainCommit{err: err, res: res}
		for _, in := range ch.Inbox {
			uc.inbox = append(uc.inbox, in.InboxKey)
		}
		for _, d := range ch.DeadLetters {
			uc.dead = append(uc.dead, d.ID)
		}
		return nil, uc
	}
	return res, nil
}

// fail classifies a handler error: permanent errors are dead-lettered at
// once, transient ones returned to the transport with backoff until
// Config.MaxAttempts. Work interrupted by Stop is always returned, never
// dead-lettered. A returned message blocks the later messages of its key
// in this unit of work.
func (l *lane) fail(ctx context.Context, it *item, err error) outcome {
	reason := ""
	switch {
	case ctx.Err() != nil:
		l.giveBack(it, 0)
		return outcome{kind: OutcomeRetried}
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

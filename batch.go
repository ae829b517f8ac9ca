package idem

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/internal/canon"
	"github.com/idemhq/idem/internal/ids"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// handlerSagaType is the inbox namespace of plain handlers: their inbox key
// is (handlerSagaType, message type, message ID).
const handlerSagaType = "idem.handler"

// item is one delivery on its way through a batch.
type item struct {
	d      transport.Delivery
	m      Machine
	h      HandlerFunc
	msg    any
	key    string // canonical
	rawKey string
	msgID  string // dedup identity
	typ    string // saga type, or handlerSagaType
	reason string // dead-letter reason when the delivery is bad input
	badErr error
	// late marks an item the engine decided to dead-letter after a failed
	// unit of work (storeFailed): it went through decode, so its inbox is
	// read first, and a message committed meanwhile is not dead-lettered.
	late bool
	tp   string // the message span's traceparent, when a Tracer is set
	// ran and handlerErr keep a plain handler's outcome: when its unit of
	// work is re-applied (after a conflict, or one message at a time), the
	// handler's side effects already happened outside it, so it does not
	// run again.
	ran        bool
	handlerErr error
}

func (it *item) sagaKey() store.Key { return store.Key{SagaType: it.typ, Key: it.key} }

// inboxKey is the item's dedup identity: its saga, and its message ID
// qualified by its message type, so that two producers whose IDs overlap
// do not have each other's messages skipped. (A handler's inbox key holds
// the message type already.) The separator U+001F cannot occur in a type
// (transport.ValidateEnvelope refuses control characters there), so the
// form is unambiguous.
func (it *item) inboxKey() store.InboxKey {
	id := it.msgID
	if it.h == nil {
		id = it.d.Envelope.Type + inboxTypeSep + id
	}
	return store.InboxKey{SagaType: it.typ, Key: it.key, MessageID: id}
}

// inboxTypeSep separates the message type from the dedup ID in a saga's
// inbox records.
const inboxTypeSep = "\x1f"

var laneSeed = maphash.MakeSeed()

// minLaneItems is the fewest messages a lane gets before a batch is split
// into more lanes: a unit of work costs its round trips whatever its size,
// so splitting a small batch across every lane costs more commits than the
// parallelism gains.
const minLaneItems = 16

// fetchSize is how many deliveries a consumer takes per receive. With a
// BatchSize below minLaneItems (latency first) it is BatchSize for each
// lane of the consumer's share (Lanes / Consumers), so that one receive
// puts several small units of work in flight at once instead of one;
// otherwise it is BatchSize.
func (e *Engine) fetchSize() int {
	if e.cfg.BatchSize >= minLaneItems {
		return e.cfg.BatchSize
	}
	return e.cfg.BatchSize * e.lanesPerBatch()
}

// process runs one batch: decode, partition into lanes by saga key, one unit
// of work per lane in parallel, then settle.
func (e *Engine) process(ctx context.Context, ds []transport.Delivery) {
	e.runLanes(ctx, (*keyOrder)(nil).register(e.plan(ds)))
}

// lanesPerBatch is the most lanes one batch is split into: its share of
// Config.Lanes, which every consumer's batches share. With several
// consumers the batches already overlap, and splitting each one further
// only adds commits (each lane is its own transaction).
func (e *Engine) lanesPerBatch() int {
	return (e.cfg.Lanes + e.cfg.Consumers - 1) / e.cfg.Consumers
}

// plan decodes a batch and splits it into lanes: the messages of one saga
// key share a lane, in the order received.
func (e *Engine) plan(ds []transport.Delivery) [][]*item {
	e.stats.received.Add(int64(len(ds)))
	n := uint64(max(1, min(e.lanesPerBatch(), len(ds)/minLaneItems)))
	if e.cfg.BatchSize < minLaneItems {
		n = uint64(e.lanesPerBatch()) // latency first: see fetchSize
	}
	lanes := map[uint64][]*item{}
	var order []uint64
	keyLane := map[string]uint64{}
	for _, d := range ds {
		it := e.decode(d)
		var lane uint64
		switch {
		case it.reason != "":
			lane = 0 // bad input shares one unit of work
		case it.h != nil:
			// Handlers never share a unit of work with sagas: a saga's
			// conflict must not run a handler's side effect again.
			lane = 1 + uint64(e.cfg.Lanes) + maphash.String(laneSeed, it.msgID)%n
		default:
			// The keys take the lanes in turn, in the order they first
			// appear, and a key's messages follow it into its lane.
			k := it.typ + "\x00" + it.key
			l, ok := keyLane[k]
			if !ok {
				l = 1 + uint64(len(keyLane))%n
				keyLane[k] = l
			}
			lane = l
		}
		if _, ok := lanes[lane]; !ok {
			order = append(order, lane)
		}
		lanes[lane] = append(lanes[lane], it)
	}
	out := make([][]*item, len(order))
	for i, l := range order {
		out[i] = lanes[l]
	}
	return out
}

func (e *Engine) decode(d transport.Delivery) *item {
	env := &d.Envelope
	it := &item{d: d, msgID: env.DedupID()}
	bad := func(reason string, err error) *item {
		it.reason, it.badErr = reason, err
		switch {
		case it.msgID == "":
			it.msgID = ids.Derive("anonymous", env.Type, string(env.Body))
		case len(it.msgID) > MaxIDBytes || transport.ValidateEnvelope(&transport.Envelope{ID: it.msgID}) != nil:
			// The dead letter's ID is a store key: never an over-long or
			// hostile value (an empty ID with a hostile idempotency key).
			it.msgID = ids.Derive("invalid", env.ID, env.IdempotencyKey, env.Type)
		}
		return it
	}
	if env.ID == "" {
		return bad(ReasonMissingID, fmt.Errorf("message of type %q has no ID", env.Type))
	}
	if err := transport.ValidateEnvelope(env); err != nil {
		// No store can be trusted with the field: the dead letter's ID is
		// derived from the raw values, never the values themselves.
		var fe *transport.FieldError
		errors.As(err, &fe)
		it.msgID = ids.Derive("invalid", env.ID, env.IdempotencyKey, env.Type)
		return bad(invalidReason(fe.Field), err)
	}
	if len(env.ID) > MaxIDBytes || len(env.IdempotencyKey) > MaxIDBytes {
		// The ID travels on as the causation ID of every emission: an
		// unbounded one could make them too large for a broker's limit.
		return bad(ReasonInvalidID, fmt.Errorf("message ID or idempotency key of %d bytes exceeds the limit of %d", max(len(env.ID), len(env.IdempotencyKey)), MaxIDBytes))
	}
	if len(env.Body) > e.cfg.MaxBodyBytes {
		return bad(ReasonOversized, fmt.Errorf("body of %d bytes exceeds the limit of %d (Config.MaxBodyBytes)", len(env.Body), e.cfg.MaxBodyBytes))
	}
	if h, ok := e.handlers[env.Type]; ok {
		it.h, it.typ, it.key = h, handlerSagaType, env.Type
		return it
	}
	m, ok := e.machines[env.Type]
	if !ok {
		return bad(ReasonUnknownType, fmt.Errorf("no saga or handler consumes message type %q", env.Type))
	}
	msg, raw, err := m.Decode(env.Type, env.Body)
	if err != nil {
		return bad(ReasonMalformed, err)
	}
	key, err := canon.Key(raw, e.cfg.MaxKeyLen)
	if err != nil {
		it.typ = m.Name()
		return bad(ReasonInvalidKey, fmt.Errorf("correlation key of %s for saga %s: %w", env.Type, m.Name(), err))
	}
	it.m, it.msg, it.rawKey, it.key, it.typ = m, msg, raw, key, m.Name()
	return it
}

// maxTraceParent bounds the W3C traceparent header copied onto emissions
// (55 bytes in version 00); a longer value is not a trace context.
const maxTraceParent = 128

var conflictPause = backoff.Policy{Base: 2 * time.Millisecond, Max: 250 * time.Millisecond}

// runUnit commits the lane's unit of work, re-applying it after conflicts,
// and reports how it ended. After the first conflict a lane with several
// keys is split into one unit of work per key, so one contended key does
// not hold back the others. Other failures go to storeFailed.
func (e *Engine) runUnit(ctx context.Context, items []*item) UnitOfWorkEnd {
	for attempt := 1; ; attempt++ {
		began := time.Now()
		res, err := e.unitOfWork(ctx, items)
		if err == nil {
			e.committed(ctx, items, res, began, attempt)
			return UnitOfWorkEnd{Outcome: UnitCommitted, Attempts: attempt}
		}
		switch {
		case errors.Is(err, store.ErrConflict) && attempt <= e.cfg.ConflictRetries:
			e.stats.conflicts.Add(1)
			e.countConflict(items)
			if groups := splitByKey(items); len(groups) > 1 {
				for _, g := range groups {
					e.runLane(ctx, g)
				}
				return UnitOfWorkEnd{Outcome: UnitSplit, Attempts: attempt, Err: err}
			}
			if !sleepCtx(ctx, conflictPause.Delay(attempt)) {
				// Stopping: the leases expire and the transport redelivers.
				return UnitOfWorkEnd{Outcome: UnitStopped, Attempts: attempt, Err: err}
			}
			continue
		case errors.Is(err, transport.ErrLeaseLost):
			e.countLeaseLost(items)
			e.log.WarnContext(ctx, "lease lost before commit; another consumer owns the messages", "messages", len(items), "error", err)
			return UnitOfWorkEnd{Outcome: UnitLeaseLost, Attempts: attempt, Err: err}
		}
		var uc *uncertainCommit
		if errors.As(err, &uc) && e.landed(ctx, uc) {
			e.committed(ctx, items, uc.res, began, attempt)
			return UnitOfWorkEnd{Outcome: UnitCommitted, Attempts: attempt}
		}
		if e.storeFailed(ctx, items, err) {
			return UnitOfWorkEnd{Outcome: UnitSplit, Attempts: attempt, Err: err}
		}
		return UnitOfWorkEnd{Outcome: UnitFailed, Attempts: attempt, Err: err}
	}
}

func (e *Engine) committed(ctx context.Context, items []*item, res *laneResult, began time.Time, attempt int) {
	if e.cfg.Observe != nil {
		e.cfg.Observe(Observation{Messages: len(items), Applied: int(res.counts.applied), Duration: time.Since(began), Conflicts: attempt - 1, SagaTypes: sagaTypes(items)})
	}
	e.settle(ctx, res)
}

// storeFailed handles a unit of work that failed for a reason other than
// a conflict. Three cases:
//
//   - the store refused the data itself (store.ErrRejected): the same
//     data fails the same way, so the lane is split into one unit of work
//     per message, and the one message refused alone is dead-lettered
//     with a reason naming what was refused;
//   - the store could not even begin (it is down or unreachable): every
//     message goes back with backoff and nothing is dead-lettered;
//   - any other store error: the messages go back with backoff, and once
//     one of them has used up Config.MaxAttempts the lane is split, so
//     that a message whose unit of work keeps failing alone is
//     dead-lettered (ReasonRetriesExhausted). The dead letter's own commit
//     tells a broken database apart from a broken message: when the
//     database cannot commit that either, the message goes back again.
//
// It reports whether it handed the messages to new units of work.
func (e *Engine) storeFailed(ctx context.Context, items []*item, err error) bool {
	var be *beginError
	rejected := errors.Is(err, store.ErrRejected)
	exhausted := slices.ContainsFunc(items, func(it *item) bool { return it.d.Attempt >= e.cfg.MaxAttempts })
	switch {
	case ctx.Err() != nil, errors.As(err, &be), errors.Is(err, store.ErrConflict), items[0].reason != "" && len(items) == 1:
		// Stopping, the store is unreachable, a key too contended for
		// Config.ConflictRetries (nothing is wrong with its messages), or
		// even a dead letter failed.
	case len(items) > 1 && (rejected || exhausted):
		e.log.WarnContext(ctx, "unit of work failed; retrying its messages one by one", "messages", len(items), "error", err)
		e.oneByOne(ctx, items)
		return true
	case rejected || exhausted:
		it := items[0]
		it.late = true
		it.reason, it.badErr = ReasonRetriesExhausted, fmt.Errorf("the store failed this message's unit of work on %d attempts: %w", it.d.Attempt, err)
		var re *store.RejectedError
		switch {
		case errors.As(err, &re) && re.Field == "state":
			it.reason, it.badErr = ReasonInvalidState, err
		case rejected:
			it.reason, it.badErr = ReasonUnstorable, err
		}
		e.runLane(ctx, items)
		return true
	}
	// A transient store error, or a commit whose outcome stayed unknown:
	// the redelivery finds the inbox records if the commit happened.
	e.log.ErrorContext(ctx, "unit of work failed; returning messages to the transport", "messages", len(items), "error", err)
	for _, it := range items {
		e.nack(ctx, it.d, e.retry.Delay(it.d.Attempt))
	}
	return false
}

// oneByOne runs each item in a unit of work of its own, in order. Once a
// message of a saga key was not committed, the later messages of that key
// go back to the transport unapplied, so arrival order holds.
func (e *Engine) oneByOne(ctx context.Context, items []*item) {
	held := map[store.Key]bool{}
	for _, it := range items {
		if it.reason == "" && it.h == nil && held[it.sagaKey()] {
			e.nack(ctx, it.d, e.retry.Delay(it.d.Attempt))
			continue
		}
		if end := e.runLane(ctx, []*item{it}); end.Outcome != UnitCommitted && it.reason == "" && it.h == nil {
			held[it.sagaKey()] = true
		}
	}
}

// beginError marks a unit of work that could not begin: the store is
// unreachable, which says nothing about the messages.
type beginError struct{ err error }

func (e *beginError) Error() string { return "begin: " + e.err.Error() }
func (e *beginError) Unwrap() error { return e.err }

// uncertainCommit is a Commit that failed for a reason that leaves its
// outcome unknown (the connection was lost during COMMIT, for one). It
// keeps what the unit of work would settle, and what to read back to learn
// whether it landed.
type uncertainCommit struct {
	err   error
	res   *laneResult
	inbox []store.InboxKey
	dead  []string // dead-letter IDs, when the unit of work wrote no inbox record
}

func (u *uncertainCommit) Error() string { return u.err.Error() }
func (u *uncertainCommit) Unwrap() error { return u.err }

// landedTries bounds the read-backs of an uncertain commit.
const landedTries = 5

// landed reads back the records an uncertain commit wrote, retrying while
// the store does not answer, and reports whether the commit happened: its
// messages are then settled and counted as applied, as the store confirms,
// instead of being redelivered and counted as duplicates.
func (e *Engine) landed(ctx context.Context, uc *uncertainCommit) bool {
	if len(uc.inbox) == 0 && len(uc.dead) == 0 {
		return false
	}
	for try := 1; try <= landedTries; try++ {
		ok, err := e.readBack(ctx, uc)
		if err == nil {
			if ok {
				e.log.WarnContext(ctx, "commit reported an error but its records are in the store: settling as committed", "error", uc.err)
			}
			return ok
		}
		if !sleepCtx(ctx, e.retry.Delay(try)) {
			return false
		}
	}
	return false
}

func (e *Engine) readBack(ctx context.Context, uc *uncertainCommit) (bool, error) {
	if len(uc.inbox) == 0 {
		dl, err := e.store.GetDeadLetter(ctx, uc.dead[0])
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		// A dead letter kept from before, whose replay is still pending,
		// is not this commit's: a landed one would have settled it.
		return err == nil && !replayPending(dl), err
	}
	uow, err := e.store.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer func() { _ = uow.Rollback(ctx) }()
	r, err := uow.Load(ctx, &store.LoadParams{Inbox: uc.inbox})
	if err != nil {
		return false, err
	}
	for _, k := range uc.inbox {
		if !r.Seen[k] {
			return false, nil
		}
	}
	return true, nil
}

func splitByKey(items []*item) [][]*item {
	idx := map[store.Key]int{}
	var out [][]*item
	for _, it := range items {
		k := it.sagaKey()
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, nil)
		}
		out[i] = append(out[i], it)
	}
	return out
}

type nackReq struct {
	d     transport.Delivery
	delay time.Duration
}

type logLine struct {
	it  *item
	rec saga.LogRecord
}

// laneResult is what a committed unit of work leaves to do.
type laneResult struct {
	acks   []transport.Delivery
	nacks  []nackReq
	outbox []Envelope
	logs   []logLine
	counts struct{ applied, ignored, dup, notFound, dead, stale, emitted int64 }
	byType map[string]*typeDelta // counts by saga type
}

// working is an instance as the lane's unit of work changes it.
type working struct {
	inst    *store.Instance // nil: no saga
	isNew   bool
	changed bool
}

// lane is one unit of work in the making: the batch's items of one lane,
// what the store loaded for them, and the changes and results they build.
type lane struct {
	e       *Engine
	ctx     context.Context
	now     time.Time
	loaded  *store.LoadResult
	res     *laneResult
	ch      *store.Changes
	work    map[store.Key]*working
	timers  map[store.TimerKey]*store.Timer // nil value: cancel
	inBatch map[store.InboxKey]bool
	blocked map[store.Key]time.Duration // keys with a message to retry
	spans   []openSpan                  // message spans awaiting the commit
	sends   []SendSpan                  // emissions' send spans awaiting the commit
	uow     store.UnitOfWork
	tokens  map[store.InboxKey]string // token of each tokened message
	claimed map[string]bool           // tokens this unit of work claims
	replays []*item                   // items that replay a dead letter
}

// newLane starts a lane's unit of work in the making.
func (e *Engine) newLane(ctx context.Context) *lane {
	return &lane{
		e: e, ctx: ctx, now: e.cfg.Clock(), loaded: &store.LoadResult{}, res: &laneResult{}, ch: &store.Changes{},
		work: map[store.Key]*working{}, timers: map[store.TimerKey]*store.Timer{},
		inBatch: map[store.InboxKey]bool{}, blocked: map[store.Key]time.Duration{},
	}
}

func (e *Engine) unitOfWork(ctx context.Context, items []*item) (*laneResult, error) {
	l := e.newLane(ctx)
	handlers := handlersOnly(items)
	if handlers {
		// Plain handlers do their own I/O: run them with no unit of work
		// open, so that no pooled connection sits idle in a transaction
		// while they call other services. Their inbox records commit
		// afterwards; a crash in between runs them again (at least once).
		if err := l.readInbox(items); err != nil {
			return nil, err
		}
		for _, it := range items {
			l.applyObserved(it)
		}
	}
	uow, err := e.store.Begin(ctx)
	if err != nil {
		if l.spans != nil { // the handlers' message spans
			l.endSpans(err)
		}
		return nil, &beginError{err}
	}
	defer func() { _ = uow.Rollback(ctx) }()
	l.uow = uow
	if !handlers {
		if err := l.load(uow, items); err != nil {
			return nil, err
		}
		for _, it := range items {
			l.applyObserved(it)
		}
	}
	l.collect()
	res, err := l.commit(uow, len(items))
	if l.spans != nil {
		l.endSpans(err)
	}
	return res, err
}

// handlersOnly reports whether every item goes to a plain handler (process
// gives handlers lanes of their own).
func handlersOnly(items []*item) bool {
	for _, it := range items {
		if it.h == nil || it.reason != "" {
			return false
		}
	}
	return len(items) > 0
}

// readInbox loads the items' inbox records in a unit of work of its own,
// rolled back at once.
func (l *lane) readInbox(items []*item) error {
	uow, err := l.e.store.Begin(l.ctx)
	if err != nil {
		return &beginError{err}
	}
	defer func() { _ = uow.Rollback(l.ctx) }()
	return l.load(uow, items)
}

// load reads, in one call, every saga and inbox record the items touch.
func (l *lane) load(uow store.UnitOfWork, items []*item) error {
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
		if tok := l.e.itemToken(it); tok != "" {
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
	loaded, err := uow.Load(l.ctx, p)
	if err != nil {
		return fmt.Errorf("load %d sagas: %w", len(p.Keys), err)
	}
	l.loaded = loaded
	return nil
}

// apply takes one item through dedup, then its handler or saga.
func (l *lane) apply(it *item) {
	res := l.res
	l.noteReplay(it)
	if it.reason != "" && !it.late {
		l.deadLetter(it, it.reason, it.badErr)
		return
	}
	ik := it.inboxKey()
	if l.loaded.Seen[ik] || l.inBatch[ik] || l.tokenGone(ik) {
		res.counts.dup++
		res.acks = append(res.acks, it.d)
		return
	}
	if it.reason != "" {
		l.deadLetter(it, it.reason, it.badErr)
		return
	}
	if it.h != nil {
		if !it.ran {
			it.ran, it.handlerErr = true, runHandler(l.ctx, it)
		}
		if err := it.handlerErr; err != nil {
			l.fail(it, err)
			return
		}
		l.markSeen(ik)
		res.counts.applied++
		res.acks = append(res.acks, it.d)
		return
	}
	if delay, ok := l.blocked[it.sagaKey()]; ok {
		// An earlier message of this key failed: keep arrival order by
		// returning this one too, unapplied.
		res.nacks = append(res.nacks, nackReq{d: it.d, delay: delay})
		return
	}
	w := l.work[it.sagaKey()]
	if w == nil {
		w = &working{inst: l.loaded.Instances[it.sagaKey()]}
		l.work[it.sagaKey()] = w
	}
	if delay, retry := l.applyOne(w, it, ik); retry {
		l.blocked[it.sagaKey()] = delay
	}
}

func (l *lane) markSeen(ik store.InboxKey) {
	l.claimToken(ik)
	l.inBatch[ik] = true
	l.ch.Inbox = append(l.ch.Inbox, store.InboxEntry{InboxKey: ik, ProcessedAt: l.now})
}

// collect turns the working instances and timers into changes.
func (l *lane) collect() {
	if ids := l.consumedReplays(); len(ids) > 0 {
		// Settled in the commit: a crash after it cannot leave them pending.
		l.ch.SettleReplays = &store.SettleReplaysParams{IDs: ids, Outcome: store.ReplaySucceeded, At: l.now}
	}
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

// commit writes the changes (on the store's own queue, with the
// deliveries' consumption and the emitted messages). A commit error that
// leaves the outcome unknown is returned as an *uncertainCommit.
func (l *lane) commit(uow store.UnitOfWork, n int) (*laneResult, error) {
	ctx, res, ch := l.ctx, l.res, l.ch
	if q, ok := uow.(store.QueueUnitOfWork); ok && l.e.queue {
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
	if err := uow.Commit(ctx, ch); err != nil {
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

// applyOne applies one message to its saga within the lane's unit of work.
// It reports the retry delay when the message failed transiently and will be
// redelivered.
func (l *lane) applyOne(w *working, it *item, ik store.InboxKey) (time.Duration, bool) {
	e, res, ch, now := l.e, l.res, l.ch, l.now
	env := &it.d.Envelope
	// A timer message is this saga's own timer only when this saga
	// scheduled it; a timer that correlates to another saga is an ordinary
	// message there.
	timerName := ""
	if env.Headers[transport.HeaderSagaType] == it.typ && env.Headers[transport.HeaderSagaKey] == it.key {
		timerName = env.Headers[transport.HeaderTimer]
	}
	markSeen := func() { l.markSeen(ik) }
	if timerName != "" && (w.inst == nil || w.inst.Timers[timerName] != env.ID) {
		// Unscheduled or rescheduled meanwhile: harmless by construction.
		if w.inst != nil {
			markSeen()
		}
		res.counts.stale++
		res.counts.ignored++
		res.acks = append(res.acks, it.d)
		return 0, false
	}

	in := saga.Input{Msg: it.msg, MsgType: env.Type, Key: it.key, MessageID: it.msgID, Now: now, CausationID: env.CausationID}
	if w.inst != nil {
		in.Exists, in.State, in.Data, in.SchemaVersion = true, saga.State(w.inst.State), w.inst.Data, w.inst.SchemaVersion
		in.Timers = w.inst.Timers
	}
	mt := l.messageTx(&in) // the handler's SQL: kept below when applied
	defer mt.undo(l.ctx)
	r, err := it.m.Apply(in)
	if err != nil {
		return l.fail(it, err)
	}
	switch r.Outcome {
	case saga.NotFound:
		if it.m.NotFound() == saga.NotFoundDeadLetter {
			l.deadLetter(it, ReasonNotFound, fmt.Errorf("no saga %s/%s and %s cannot start one", it.typ, it.key, env.Type))
			return 0, false
		}
		res.counts.notFound++
		res.acks = append(res.acks, it.d)
		return 0, false
	case saga.Ignored:
		if r.Stale {
			res.counts.stale++ // a request's late or superseded outcome
		}
		if timerName != "" {
			delete(w.inst.Timers, timerName)
			w.changed = true
		}
		markSeen()
		res.counts.ignored++
		res.acks = append(res.acks, it.d)
		return 0, false
	}

	// Applied: encode everything first, so an encoding failure leaves no trace.
	out := make([]Envelope, 0, len(r.Emitted))
	for _, em := range r.Emitted {
		envOut, err := e.emission(it, em.Type, em.Msg, string(em.Intent), "", em.Index, now)
		if err != nil {
			return l.fail(it, Permanent(err))
		}
		out = append(out, envOut)
	}
	sched := make([]store.Timer, 0, len(r.Scheduled))
	for _, s := range r.Scheduled {
		envOut, err := e.emission(it, s.Type, s.Msg, "timer", s.Name, s.Index, now)
		if err != nil {
			return l.fail(it, Permanent(err))
		}
		sched = append(sched, store.Timer{SagaType: it.typ, Key: it.key, Name: s.Name, DueAt: s.DueAt, Envelope: envOut})
	}
	requestIDs(&r, out, sched)

	if err := mt.keep(l.ctx); err != nil {
		return l.fail(it, err)
	}
	if w.inst == nil {
		w.inst = &store.Instance{SagaType: it.typ, Key: it.key, Version: 1, CreatedAt: now}
		w.isNew = true
	}
	inst := w.inst
	from := inst.State
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
	version := inst.Version
	if !w.isNew {
		version++
	}
	if from == "" {
		from = string(saga.Initial)
	}
	ch.Journal = append(ch.Journal, store.JournalEntry{
		SagaType: it.typ, Key: it.key, RawKey: it.rawKey, MessageID: it.msgID, EventType: env.Type,
		FromState: from, ToState: inst.State, Version: version, At: now,
	})
	l.traceSends(out, sched)
	markSeen()
	l.mint(out)
	for _, o := range out {
		ch.Outbox = append(ch.Outbox, store.OutboxMessage{Envelope: o, CreatedAt: now})
	}
	res.outbox = append(res.outbox, out...)
	res.counts.emitted += int64(len(out))
	res.counts.applied++
	res.acks = append(res.acks, it.d)
	for _, l := range r.Logs {
		res.logs = append(res.logs, logLine{it: it, rec: l})
	}
	return 0, false
}

// emission builds the envelope of an emitted message or timer. Its ID is
// derived from the incoming message's dedup ID, the saga and the emission's
// index, so re-processing yields the same ID.
func (e *Engine) emission(it *item, typ string, msg any, intent, timer string, index int, now time.Time) (Envelope, error) {
	body, err := json.Marshal(msg)
	if err != nil {
		return Envelope{}, fmt.Errorf("encode emitted %s: %w", typ, err)
	}
	if len(body) > e.cfg.MaxBodyBytes {
		// No consumer would accept it, and a transport may refuse it.
		return Envelope{}, fmt.Errorf("emitted %s has a body of %d bytes, over the limit of %d (Config.MaxBodyBytes)", typ, len(body), e.cfg.MaxBodyBytes)
	}
	env := Envelope{
		ID:          ids.Derive("emit", it.msgID, it.typ, it.key, strconv.Itoa(index), timer),
		Type:        typ,
		CausationID: it.d.Envelope.ID,
		SentAt:      now,
		Body:        body,
		Headers: map[string]string{
			transport.HeaderIntent:   intent,
			transport.HeaderSagaType: it.typ,
			transport.HeaderSagaKey:  it.key,
		},
	}
	tp := it.tp // the current span's, when a Tracer is set
	if tp == "" {
		tp = it.d.Envelope.Headers[transport.HeaderTraceParent]
	}
	if tp != "" && len(tp) <= maxTraceParent {
		env.Headers[transport.HeaderTraceParent] = tp
	}
	if timer != "" {
		env.Headers[transport.HeaderTimer] = timer
	} else if ft := faultFor(it.m, typ); ft != "" {
		env.Headers[transport.HeaderFault] = ft
	}
	if m, ok := e.machines[typ]; ok {
		env.CorrelationID = e.correlationID(m, msg)
	} else {
		// Consumed elsewhere (a handler, another engine): the message
		// continues the conversation of the one that caused it.
		env.CorrelationID = it.d.Envelope.CorrelationID
		if env.CorrelationID == "" {
			env.CorrelationID = it.key
		}
	}
	return env, nil
}

// correlationID is the canonical key m correlates msg to, or "" when msg
// has none or an invalid one (its consumer dead-letters it): an
// envelope's CorrelationID is always a value every transport can carry,
// and the NFC and NFD forms of a key partition alike.
func (e *Engine) correlationID(m Machine, msg any) string {
	raw, ok := m.Correlate(msg)
	if !ok {
		return ""
	}
	key, err := canon.Key(raw, e.cfg.MaxKeyLen)
	if err != nil {
		return ""
	}
	return key
}

// storableText makes s safe for any store's text column: U+0000 becomes
// the four characters \x00 and invalid UTF-8 becomes U+FFFD. Error texts
// quote the values they name, so this only matters for a user's error
// message that embeds hostile input.
func storableText(s string) string {
	if utf8.ValidString(s) && !strings.ContainsRune(s, 0) {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\\x00")
}

// fail classifies a handler error: permanent errors are dead-lettered at
// once, transient ones returned to the transport with backoff until
// Config.MaxAttempts. Work interrupted by Stop is always returned, never
// dead-lettered. It reports the retry delay when the message is returned.
func (l *lane) fail(it *item, err error) (time.Duration, bool) {
	e, ctx, res := l.e, l.ctx, l.res
	reason := ""
	switch {
	case ctx.Err() != nil:
		res.nacks = append(res.nacks, nackReq{d: it.d, delay: 0})
		return 0, true
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
	case it.d.Attempt >= e.cfg.MaxAttempts:
		reason = ReasonRetriesExhausted
	}
	if reason != "" {
		l.deadLetter(it, reason, err)
		return 0, false
	}
	delay, ok := retryDelay(err)
	if !ok {
		delay = e.retry.Delay(it.d.Attempt)
	}
	e.log.WarnContext(ctx, "message failed; will retry", logSagaType, it.typ, logSagaKey, it.key, logMessageID, it.msgID,
		logAttempt, it.d.Attempt, "retry_in", delay, "error", err)
	res.nacks = append(res.nacks, nackReq{d: it.d, delay: delay})
	return delay, true
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

func (l *lane) deadLetter(it *item, reason string, err error) {
	res, now := l.res, l.now
	l.ch.DeadLetters = append(l.ch.DeadLetters, store.DeadLetter{
		ID: it.msgID, Envelope: it.d.Envelope, Reason: reason, Error: storableText(err.Error()),
		SagaType: it.typ, Key: it.key, Attempts: max(it.d.Attempt, 1), FirstFailedAt: now, LastFailedAt: now,
	})
	res.counts.dead++
	res.acks = append(res.acks, it.d)
	l.fault(it, reason, err)
	res.logs = append(res.logs, logLine{it: it, rec: saga.LogRecord{Level: slog.LevelWarn, Msg: "message dead-lettered", Args: []any{logReason, reason, "error", err.Error()}}})
}

// settle runs after a successful commit: publish the outbox, acknowledge,
// return failed deliveries, and count. Publishing before acknowledging
// means a consumer never sees its queue empty while the consequences of a
// message are still in this process.
func (e *Engine) settle(ctx context.Context, res *laneResult) {
	// Counted first, once the commit is known to have landed: a caller
	// that sees the deliveries acknowledged then sees them counted.
	c := &res.counts
	s := &e.stats
	s.applied.Add(c.applied)
	s.ignored.Add(c.ignored)
	s.duplicates.Add(c.dup)
	s.notFound.Add(c.notFound)
	s.deadLettered.Add(c.dead)
	s.staleTimers.Add(c.stale)
	s.emitted.Add(c.emitted)
	e.addTypeCounts(res.byType)
	if len(res.outbox) > 0 {
		if err := e.tr.Publish(ctx, res.outbox); err != nil {
			e.log.WarnContext(ctx, "publish after commit failed; the outbox relay will send", "messages", len(res.outbox), "error", err)
		} else {
			ids := make([]string, len(res.outbox))
			for i := range res.outbox {
				ids[i] = res.outbox[i].ID
			}
			if err := e.store.MarkSent(ctx, ids, e.cfg.Clock()); err != nil {
				e.log.WarnContext(ctx, "mark outbox sent failed; the relay will send again with the same IDs", "messages", len(ids), "error", err)
			}
		}
	}
	if len(res.acks) > 0 {
		if err := e.tr.Ack(ctx, res.acks); err != nil {
			// Committed already: a redelivery is recognised by the inbox.
			e.log.WarnContext(ctx, "ack after commit failed; duplicates will be skipped", "deliveries", len(res.acks), "error", err)
		}
	}
	for _, n := range res.nacks {
		e.nack(ctx, n.d, n.delay)
	}
	for _, l := range res.logs {
		args := append([]any{logSagaType, l.it.typ, logSagaKey, l.it.key, logMessageID, l.it.msgID}, l.rec.Args...)
		e.log.Log(ctx, l.rec.Level, l.rec.Msg, args...)
	}
}

func (e *Engine) nack(ctx context.Context, d transport.Delivery, delay time.Duration) {
	e.stats.retries.Add(1)
	if err := e.tr.Nack(ctx, d, delay); err != nil && ctx.Err() == nil {
		e.log.WarnContext(ctx, "nack failed; the lease will expire", logMessageID, d.Envelope.ID, "error", err)
	}
}

package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// lane is one attempt of a unit of work in the making: the batch's items
// of one lane, what the store loaded for them, and the changes and results
// the per-message steps (steps.go) build. Its life is load, the steps of
// each item in order, collect, commit; the units (unit.go) run it.
type lane struct {
	*base
	changes // what the unit of work writes, and leaves to do
	emit    emitter
	loaded  *store.LoadResult
	blocked map[store.Key]time.Duration // keys with a message to retry
	uow     store.UnitOfWork
	replays []*item // items that replay a dead letter
	// slowest is the item whose steps took longest, and how long.
	slowest     *item
	slowestTook time.Duration
}

func newLane(b *base, emit emitter, items []*item) *lane {
	return &lane{
		base: b, changes: newChanges(b.cfg.Clock(), b.cfg.Dedup == DedupToken, items), emit: emit,
		loaded: &store.LoadResult{}, blocked: map[store.Key]time.Duration{},
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
// leaves the outcome unknown is returned as an *uncertainCommit; a
// conflict, a refusal (store.ErrRejected, store.ErrReadOnly) or a lost
// lease committed nothing.
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
		if errors.Is(err, store.ErrConflict) || errors.Is(err, store.ErrRejected) || errors.Is(err, transport.ErrLeaseLost) || errors.Is(err, store.ErrReadOnly) || ctx.Err() != nil {
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

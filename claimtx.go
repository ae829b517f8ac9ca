package idem

import (
	"context"
	"errors"
	"time"

	"github.com/idemhq/idem/internal/tuning"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Claiming inside the unit of work. When the transport is the store's own
// queue and its units of work can claim (store.ClaimUnitOfWork), a
// consumer that found a backlog takes its next batch inside the unit of
// work that applies it: BEGIN and the claim in one round trip, then the
// load, then the commit that writes the state and settles the claim. The
// queue rows are deleted once, by the claim, instead of being leased by
// Receive's own transaction and deleted by the commit.
//
// A claimed batch always settles as a leased one would, so that per-key
// order is the lease path's (docs/architecture.md, "Order"):
//
//   - a message to retry later (and the later messages of its key in the
//     batch) goes back to the queue in the commit (Return), with its
//     attempt counted and the backoff a Nack would give;
//   - when the unit of work cannot commit as applied (a conflict, data
//     the store refuses, a failed load), the store rolls it back to the
//     claim and Lease turns the claim into a lease, in one round trip;
//     the batch then goes down the lease path (runUnit: conflict retries
//     split by key, one by one, dead letters, backoff);
//   - a commit lost with its connection is read back (landed): settled
//     when it landed, and otherwise the claim went with the transaction,
//     and the messages are back untouched, as after a crash.
//
// In every case the batch's lane ends only after its messages were
// committed, returned with a delay or leased, so a later batch holding
// one of its keys never overtakes a message the lease path would hold.
//
// The engine claims that way only when the whole batch is one unit of work
// that nothing outside the transaction depends on:
//
//   - a batch is one lane (its share of Config.Lanes, Lanes / Consumers
//     rounded up, is 1): lanes are separate transactions, and the claim
//     can sit in only one of them;
//   - no plain handler is registered: handlers run outside any
//     transaction, so that no connection idles in one while they call
//     other services;
//   - consumers that take turns on one stream (Config.Consumers > 1
//     without Config.PartitionedReceive) are no more than Config.Lanes. A
//     claimed batch holds its slot (and its connection) while it waits
//     for an earlier batch holding one of its keys; a consumer claims only
//     in its turn, and each consumer has at most one batch in flight, so
//     at most Consumers - 1 claimed batches wait while the earliest batch
//     in flight, which waits for nobody, needs a slot: with Lanes ≥
//     Consumers one is always free (TestClaimInTurnHotKeysFinish).
//
// A consumer claims in units of work while its batches come back full (a
// backlog); when a claim or a receive comes back short, it waits in
// Receive, which blocks until messages arrive.

// claimsInTx reports whether the engine's consumers may claim inside the
// unit of work, given one of the store's units of work. Consumers taking
// turns claim only with tuning.ClaimInTurn set (measured not to pay).
func (e *Engine) claimsInTx(uow store.UnitOfWork) bool {
	_, ok := uow.(store.ClaimUnitOfWork)
	_, partitioned := e.tr.(transport.PartitionedConsumer)
	inTurn := e.cfg.Consumers > 1 && !(partitioned && e.cfg.PartitionedReceive)
	return ok && e.queue && e.lanesPerBatch() == 1 && len(e.handlers) == 0 &&
		(!inTurn || (tuning.ClaimInTurn.Load() && e.cfg.Lanes >= e.cfg.Consumers))
}

// claimer returns the claim function of the consumer of partition part of
// parts (0 of 1: every message), or nil when the engine does not claim
// inside units of work.
func (e *Engine) claimer(part, parts int) func(context.Context) int {
	if !e.claimTx {
		return nil
	}
	return func(ctx context.Context) int { return e.claimBatch(ctx, part, parts) }
}

// claimedBatch is a batch claimed inside the unit of work that applies it.
// It holds one of the Config.Lanes slots until runClaimed ends.
type claimedBatch struct {
	uow   store.ClaimUnitOfWork
	items []*item
	// lost is set when the claim went with its transaction (lost): the
	// rows are back untouched, their attempt not counted, so the consumer
	// must take them next with Receive, which counts it, and not claim
	// them again at once (a batch whose transaction always dies would
	// loop on the claim for ever).
	lost bool
}

// claim takes a slot, begins a unit of work and claims up to
// Config.BatchSize messages of partition part of parts in it. It returns
// nil, with the slot released, when it claimed nothing.
func (e *Engine) claim(ctx context.Context, part, parts int) *claimedBatch {
	e.slots <- struct{}{}
	uow, err := e.store.Begin(ctx)
	if err != nil {
		<-e.slots
		return nil // Receive meets the same store and reports it
	}
	cu, ok := uow.(store.ClaimUnitOfWork)
	var ds []transport.Delivery
	if ok {
		ds, err = cu.Claim(ctx, e.cfg.BatchSize, part, parts)
	}
	if !ok || err != nil || len(ds) == 0 {
		_ = uow.Rollback(ctx)
		<-e.slots
		if err != nil && ctx.Err() == nil {
			e.log.WarnContext(ctx, "claim inside a unit of work failed; receiving instead", "error", err)
		}
		return nil
	}
	e.stats.received.Add(int64(len(ds)))
	items := make([]*item, len(ds))
	for i, d := range ds {
		items[i] = e.decode(d)
	}
	return &claimedBatch{uow: cu, items: items}
}

// claimBatch claims a batch of partition part of parts and runs it, for a
// consumer that keeps no key order with others. It returns how many
// deliveries it claimed and settled (committed, returned or leased): 0
// when it claimed none, or when the claim was lost with its transaction.
func (e *Engine) claimBatch(ctx context.Context, part, parts int) int {
	c := e.claim(ctx, part, parts)
	if c == nil {
		return 0
	}
	e.runClaimed(ctx, c, (*keyOrder)(nil).register([][]*item{c.items})[0])
	if c.lost {
		return 0
	}
	return len(c.items)
}

// runClaimed runs a claimed batch as lane lr: after the earlier lanes
// holding its keys, it applies and commits it, then releases its slot and
// ends the lane.
func (e *Engine) runClaimed(ctx context.Context, c *claimedBatch, lr *laneRun) {
	defer e.order.end(lr)
	defer func() { <-e.slots }()
	defer func() { _ = c.uow.Rollback(ctx) }()
	lr.wait(ctx)
	if ctx.Err() != nil {
		return // aborting: the rollback returns the batch untouched
	}
	t := e.cfg.Tracer
	if t == nil {
		e.applyClaimed(ctx, c)
		return
	}
	ctx, span := t.StartUnitOfWork(ctx, e.trace.uowStart(c.items))
	span.End(e.applyClaimed(ctx, c))
}

// applyClaimed loads, applies and commits the claimed batch in its unit
// of work, returning the messages to retry in the same commit; when it
// cannot commit as applied, it hands the batch to the lease path.
func (e *Engine) applyClaimed(ctx context.Context, c *claimedBatch) UnitOfWorkEnd {
	began := time.Now()
	l := e.newLane(ctx)
	l.uow = c.uow
	if err := l.load(c.uow, c.items); err != nil {
		return e.unclaimed(ctx, c, err)
	}
	for _, it := range c.items {
		l.applyObserved(it)
	}
	l.collect()
	returned := int64(len(l.res.nacks))
	for _, n := range l.res.nacks {
		if err := c.uow.Return(ctx, n.d, n.delay); err != nil {
			l.endSpans(err)
			return e.unclaimed(ctx, c, err)
		}
	}
	l.res.nacks = nil
	res, err := l.commit(c.uow, len(c.items))
	if l.spans != nil {
		l.endSpans(err)
	}
	if err != nil {
		var uc *uncertainCommit
		if !errors.As(err, &uc) {
			return e.unclaimed(ctx, c, err)
		}
		// The store kept the claim (the commit was refused and cannot
		// have landed), or the transaction ended: read it back.
		if items, lerr := e.lease(ctx, c, err); lerr == nil {
			return e.leased(ctx, items)
		}
		if !e.landed(ctx, uc) {
			return e.lost(ctx, c, err)
		}
		res = uc.res
	}
	e.stats.retries.Add(returned)
	e.committed(ctx, c.items, res, began, 1)
	return UnitOfWorkEnd{Outcome: UnitCommitted, Attempts: 1}
}

// unclaimed handles a claimed batch whose unit of work failed with err:
// when the store kept the claim, Lease turns it into a lease and the batch
// goes down the lease path; otherwise the claim went with the transaction.
func (e *Engine) unclaimed(ctx context.Context, c *claimedBatch, err error) UnitOfWorkEnd {
	items, lerr := e.lease(ctx, c, err)
	if lerr != nil {
		return e.lost(ctx, c, err)
	}
	return e.leased(ctx, items)
}

// lease turns the claim of a batch whose unit of work failed with err
// into a lease, and returns the batch's items with their leased
// deliveries.
func (e *Engine) lease(ctx context.Context, c *claimedBatch, err error) ([]*item, error) {
	ds, lerr := c.uow.Lease(ctx)
	if lerr != nil {
		return nil, lerr
	}
	if errors.Is(err, store.ErrConflict) {
		e.stats.conflicts.Add(1)
		e.countConflict(c.items)
	}
	items := make([]*item, len(ds))
	for i, d := range ds {
		items[i] = e.decode(d)
	}
	return items, nil
}

// leased runs a batch leased from its failed claim down the lease path,
// in the claim's slot and lane.
func (e *Engine) leased(ctx context.Context, items []*item) UnitOfWorkEnd {
	end := e.runUnit(ctx, items)
	end.Attempts++
	return end
}

// lost reports a claimed batch whose claim went with its transaction: its
// messages are back in the queue untouched, as after a crash.
func (e *Engine) lost(ctx context.Context, c *claimedBatch, err error) UnitOfWorkEnd {
	c.lost = true
	if ctx.Err() == nil {
		e.log.WarnContext(ctx, "claimed batch failed with its transaction; its messages are back in the queue untouched", "messages", len(c.items), "error", err)
	}
	return UnitOfWorkEnd{Outcome: UnitFailed, Attempts: 1, Err: err}
}

package idem

import (
	"context"
	"errors"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Claiming inside the unit of work. When the transport is the store's own
// queue and its units of work can claim (store.ClaimUnitOfWork), a
// consumer that found a backlog takes its next batch inside the unit of
// work that applies it: BEGIN and the claim in one round trip, then the
// load, then the commit that writes the state and settles the claim. The
// queue rows are deleted once, by the claim, instead of being leased by
// Receive's own transaction and deleted by the commit, and a crash before
// the commit returns them untouched.
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
//   - no key order is kept across consumers: one consumer, or
//     Config.PartitionedReceive. Consumers sharing one stream register
//     each batch's keys in turn and wait for earlier batches holding them;
//     a claimed batch rolled back (below) would then be overtaken by a
//     later batch holding its keys, and one waiting with its connection
//     could keep a leased batch it waits for from getting one;
//   - the batch commits as it was applied: a message to retry later, a
//     conflict, a store error or an uncertain commit rolls the unit of
//     work back, which returns the batch untouched, and the consumer takes
//     it again with Receive, where the lease path handles all of these
//     (attempt counts, backoff, splitting, read-back). The consumer owns
//     the batch's keys (alone, or by partition), so it receives those
//     messages again before any later message of their keys.
//
// A consumer claims in units of work while its batches come back full (a
// backlog); when a claim or a receive comes back short, it waits in
// Receive, which blocks until messages arrive.

// errReturned ends the spans of a claimed batch that was rolled back for
// the lease path.
var errReturned = errors.New("claimed batch rolled back: its messages go back to the queue untouched, for Receive")

// claimsInTx reports whether the engine's consumers may claim inside the
// unit of work, given one of the store's units of work.
func (e *Engine) claimsInTx(uow store.UnitOfWork) bool {
	_, ok := uow.(store.ClaimUnitOfWork)
	_, partitioned := e.tr.(transport.PartitionedConsumer)
	ordered := e.cfg.Consumers > 1 && !(partitioned && e.cfg.PartitionedReceive)
	return ok && e.queue && e.lanesPerBatch() == 1 && len(e.handlers) == 0 && !ordered
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

// claimBatch claims up to Config.BatchSize messages of partition part of
// parts inside a unit of work, applies them and commits. It returns how
// many deliveries it committed: 0 when the queue had none visible, or when
// the batch was rolled back for the lease path. Its unit of work takes one
// of the Config.Lanes slots, as a lane does.
func (e *Engine) claimBatch(ctx context.Context, part, parts int) int {
	e.slots <- struct{}{}
	defer func() { <-e.slots }()
	uow, err := e.store.Begin(ctx)
	if err != nil {
		return 0 // Receive meets the same store and reports it
	}
	defer func() { _ = uow.Rollback(ctx) }()
	cu, ok := uow.(store.ClaimUnitOfWork)
	if !ok {
		return 0
	}
	ds, err := cu.Claim(ctx, e.cfg.BatchSize, part, parts)
	if err != nil || len(ds) == 0 {
		if err != nil && ctx.Err() == nil {
			e.log.WarnContext(ctx, "claim inside a unit of work failed; receiving instead", "error", err)
		}
		return 0
	}
	items := make([]*item, len(ds))
	for i, d := range ds {
		items[i] = e.decode(d)
	}
	if t := e.cfg.Tracer; t != nil {
		var span UnitOfWorkSpan
		ctx, span = t.StartUnitOfWork(ctx, UnitOfWorkStart{SagaType: commonType(items), Messages: len(items)})
		end := UnitOfWorkEnd{Outcome: UnitFailed, Attempts: 1, Err: errReturned}
		defer func() { span.End(end) }()
		if n := e.applyClaimed(ctx, uow, items); n > 0 {
			end = UnitOfWorkEnd{Outcome: UnitCommitted, Attempts: 1}
			return n
		}
		return 0
	}
	return e.applyClaimed(ctx, uow, items)
}

// applyClaimed loads, applies and commits the claimed items in uow, and
// settles them; it returns how many it committed, 0 when it left uow to be
// rolled back.
func (e *Engine) applyClaimed(ctx context.Context, uow store.UnitOfWork, items []*item) int {
	began := time.Now()
	l := e.newLane(ctx)
	l.uow = uow
	if err := l.load(uow, items); err != nil {
		return 0
	}
	for _, it := range items {
		l.applyObserved(it)
	}
	if len(l.res.nacks) > 0 {
		l.endSpans(errReturned)
		return 0
	}
	l.collect()
	res, err := l.commit(uow, len(items))
	if l.spans != nil {
		l.endSpans(err)
	}
	var uc *uncertainCommit
	switch {
	case err == nil:
	case errors.As(err, &uc) && e.landed(ctx, uc):
		res = uc.res
	default:
		return 0
	}
	e.stats.received.Add(int64(len(items)))
	e.committed(ctx, items, res, began, 1)
	return len(items)
}

package idem

import (
	"context"
	"errors"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// claimSource is the consume loop's source that claims a batch inside the
// unit of work that applies it. When the transport is the store's own
// queue and its units of work can claim (store.ClaimUnitOfWork), a
// consumer that found a backlog takes its next batch that way: BEGIN and
// the claim in one round trip, then the load, then the commit that writes
// the state and settles the claim. The queue rows are deleted once, by the
// claim, instead of being leased by Receive's own transaction and deleted
// by the commit.
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
//     the batch then goes down the lease path (units.runUnit);
//   - a commit lost with its connection is read back (landed): settled
//     when it landed, and otherwise the claim went with the transaction,
//     and the messages are back untouched, as after a crash.
//
// The engine claims only when the whole batch is one unit of work that
// nothing outside the transaction depends on, and no other consumer
// shares its stream (claimsInUnit): a batch is one lane, no plain handler
// is registered (handlers run outside any transaction), and the consumer
// has its partition or the stream to itself. (Claiming in turn, with
// consumers sharing one stream, was built and measured not to pay:
// docs/benchmarks.md.)
type claimSource struct {
	*base
	plan        *planner
	units       *units
	part, parts int
}

// claimsInUnit reports whether consumers may claim inside units of work
// (see claimSource); Start asks it once, with a probe unit of work.
func claimsInUnit(b *base, reg *registry, plan *planner, uow store.UnitOfWork) bool {
	_, ok := claimUnit(uow)
	return ok && b.caps.queue && plan.lanesPerBatch() == 1 && len(reg.handlers) == 0
}

// claimed is a batch claimed inside the unit of work that applies it. It
// holds one of the Config.Lanes slots until it is settled.
type claimed struct {
	uow   store.ClaimUnitOfWork
	items []*item
	// lost is set when the claim went with its transaction: the rows are
	// back untouched, their attempt not counted, so the consumer must take
	// them next with Receive, which counts it, and not claim them again at
	// once (a batch whose transaction always dies would loop on the claim
	// for ever).
	lost bool
}

// run claims a batch and runs it. It returns how many deliveries it
// claimed and settled (committed, returned or leased): 0 when it claimed
// none, or when the claim was lost with its transaction.
func (s *claimSource) run(ctx context.Context) int {
	c := s.take(ctx)
	if c == nil {
		return 0
	}
	defer func() { <-s.units.slots }()
	// Rolled back last (a no-op after a commit), in the unit of work's
	// span when there is one.
	defer func() { _ = c.uow.Rollback(ctx) }()
	if ctx.Err() != nil {
		return 0 // aborting: the rollback returns the batch untouched
	}
	if t := s.cfg.Tracer; t != nil {
		var span UnitOfWorkSpan
		ctx, span = t.StartUnitOfWork(ctx, s.trace.uowStart(c.items))
		span.End(s.apply(ctx, c))
	} else {
		s.apply(ctx, c)
	}
	if c.lost {
		return 0
	}
	return len(c.items)
}

// take takes a slot, begins a unit of work and claims up to
// Config.BatchSize messages of the source's partition in it. It returns
// nil, with the slot released, when it claimed nothing.
func (s *claimSource) take(ctx context.Context) *claimed {
	s.units.slots <- struct{}{}
	uow, err := s.store.Begin(ctx)
	if err != nil {
		<-s.units.slots
		return nil // Receive meets the same store and reports it
	}
	cu, ok := claimUnit(uow)
	var ds []transport.Delivery
	if ok {
		ds, err = cu.Claim(ctx, s.cfg.BatchSize, s.part, s.parts)
	}
	if !ok || err != nil || len(ds) == 0 {
		_ = uow.Rollback(ctx)
		<-s.units.slots
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "claim inside a unit of work failed; receiving instead", "error", err)
		}
		return nil
	}
	s.obs.received(len(ds))
	return &claimed{uow: cu, items: s.decode(ds)}
}

func (s *claimSource) decode(ds []transport.Delivery) []*item {
	items := make([]*item, len(ds))
	for i, d := range ds {
		items[i] = s.plan.decode(d)
	}
	return items
}

// apply loads, applies and commits the claimed batch in its unit of work,
// returning the messages to retry in the same commit; when it cannot
// commit as applied, it hands the batch to the lease path.
func (s *claimSource) apply(ctx context.Context, c *claimed) UnitOfWorkEnd {
	began := time.Now()
	l := newLane(s.base, s.units.emit, c.items)
	l.uow = c.uow
	if err := l.load(ctx, c.uow, c.items); err != nil {
		return s.unclaimed(ctx, c, err)
	}
	runSteps(ctx, l, c.items)
	l.collect()
	returned := len(l.res.nacks)
	for _, n := range l.res.nacks {
		if err := c.uow.Return(ctx, n.d, n.delay); err != nil {
			s.obs.ended(l.res.att, err)
			return s.unclaimed(ctx, c, err)
		}
	}
	l.res.nacks = nil
	res, err := l.commit(ctx, len(c.items))
	s.obs.ended(l.res.att, err)
	if err != nil {
		var uc *uncertainCommit
		if !errors.As(err, &uc) {
			return s.unclaimed(ctx, c, err)
		}
		// The store kept the claim (the commit was refused and cannot
		// have landed), or the transaction ended: read it back.
		if items, lerr := s.lease(ctx, c, err); lerr == nil {
			return s.leased(ctx, items)
		}
		if !s.units.landed(ctx, uc) {
			return s.lost(ctx, c, err)
		}
		res = uc.res
	}
	s.obs.retried(returned)
	s.units.committed(ctx, res, began, 1)
	return UnitOfWorkEnd{Outcome: UnitCommitted, Attempts: 1}
}

// unclaimed handles a claimed batch whose unit of work failed with err:
// when the store kept the claim, Lease turns it into a lease and the batch
// goes down the lease path; otherwise the claim went with the transaction.
func (s *claimSource) unclaimed(ctx context.Context, c *claimed, err error) UnitOfWorkEnd {
	items, lerr := s.lease(ctx, c, err)
	if lerr != nil {
		return s.lost(ctx, c, err)
	}
	return s.leased(ctx, items)
}

// lease turns the claim of a batch whose unit of work failed with err
// into a lease, and returns the batch's items with their leased
// deliveries.
func (s *claimSource) lease(ctx context.Context, c *claimed, err error) ([]*item, error) {
	ds, lerr := c.uow.Lease(ctx)
	if lerr != nil {
		return nil, lerr
	}
	if errors.Is(err, store.ErrConflict) {
		s.obs.conflicted(c.items)
	}
	return s.decode(ds), nil
}

// leased runs a batch leased from its failed claim down the lease path,
// in the claim's slot.
func (s *claimSource) leased(ctx context.Context, items []*item) UnitOfWorkEnd {
	ds := make([]transport.Delivery, len(items))
	for i, it := range items {
		ds[i] = it.d
	}
	r := s.caps.leases.keep(ctx, ds, nil) // the unit of work reports a lost lease
	defer r.stop()
	end := s.units.runUnit(ctx, items)
	end.Attempts++
	return end
}

// lost reports a claimed batch whose claim went with its transaction: its
// messages are back in the queue untouched, as after a crash.
func (s *claimSource) lost(ctx context.Context, c *claimed, err error) UnitOfWorkEnd {
	c.lost = true
	if ctx.Err() == nil {
		s.log.WarnContext(ctx, "claimed batch failed with its transaction; its messages are back in the queue untouched", "messages", len(c.items), "error", err)
	}
	return UnitOfWorkEnd{Outcome: UnitFailed, Attempts: 1, Err: err}
}

package idem

import (
	"context"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// claimer is the source's way to claim a batch inside the unit of work
// that applies it (source.go). When the transport is the store's own
// queue and its units of work can claim (store.ClaimUnitOfWork), a
// consumer that found a backlog takes its next batch that way: BEGIN and
// the claim in one round trip, then the load, then the commit that writes
// the state and settles the claim. The queue rows are deleted once, by the
// claim, instead of being leased by Receive's own transaction and deleted
// by the commit. The units run a claimed batch as they run a leased one
// (units.runClaimed).
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
type claimer struct {
	*base
	slots       chan struct{} // the units' (Config.Lanes)
	part, parts int
}

// claimsInUnit reports whether consumers may claim inside units of work
// (see claimer); Start asks it once, with a probe unit of work.
func claimsInUnit(b *base, reg *registry, plan *planner, uow store.UnitOfWork) bool {
	_, ok := claimUnit(uow)
	return ok && b.caps.queue && plan.lanesPerBatch() == 1 && len(reg.handlers) == 0
}

// claimed is a batch's claim: the unit of work it was claimed in, which
// holds one of the Config.Lanes slots until the batch is settled.
type claimed struct {
	uow store.ClaimUnitOfWork
	n   int // deliveries claimed
	// lost is set when the claim went with its transaction: the rows are
	// back untouched, their attempt not counted, so the consumer must take
	// them next with Receive, which counts it, and not claim them again at
	// once (a batch whose transaction always dies would loop on the claim
	// for ever).
	lost bool
}

// take takes a slot, begins a unit of work and claims up to
// Config.BatchSize messages of the claimer's partition in it. It returns
// false, with the slot released, when it claimed nothing.
func (s *claimer) take(ctx context.Context) (batch, bool) {
	if s.shares != nil {
		if s.shares.current().Parts > 1 {
			// A claim reads the whole queue (or a consumer's partition),
			// not this replica's share: receive the share instead.
			return batch{}, false
		}
		s.shares.took(0)
	}
	s.slots <- struct{}{}
	uow, err := s.store.Begin(ctx)
	if err != nil {
		<-s.slots
		return batch{}, false // Receive meets the same store and reports it
	}
	cu, ok := claimUnit(uow)
	var ds []transport.Delivery
	if ok {
		ds, err = cu.Claim(ctx, s.cfg.BatchSize, s.part, s.parts)
	}
	if !ok || err != nil || len(ds) == 0 {
		_ = uow.Rollback(ctx)
		<-s.slots
		if err != nil && ctx.Err() == nil {
			s.log.WarnContext(ctx, "claim inside a unit of work failed; receiving instead", "error", err)
		}
		return batch{}, false
	}
	return batch{ds: ds, full: len(ds) == s.cfg.BatchSize, claim: &claimed{uow: cu, n: len(ds)}}, true
}

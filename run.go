package idem

import (
	"context"
	"errors"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// run runs a batch, the one runner for every source's batches: a claimed
// batch in the unit of work that claimed it (runClaimed), a leased one
// lane by lane (runLanes), its leases kept alive while it runs.
func (u *units) run(ctx context.Context, b *batch) {
	if b.claim != nil {
		u.runClaimed(ctx, b)
		return
	}
	r := u.caps.leases.keep(ctx, b.ds, b.renewals)
	u.runLanes(ctx, b.lanes)
	r.stop()
	u.holds.settle(ctx, b.ds) // the holds no commit released (flow_broker.go)
}

// runClaimed runs a claimed batch, one lane, in the unit of work that
// claimed it, then ends that unit of work and gives its slot back.
func (u *units) runClaimed(ctx context.Context, b *batch) {
	c := b.claim
	defer func() { <-u.slots }()
	// Rolled back last: a no-op after a commit, and after a failed one
	// only once Lease has turned the claim into a lease.
	defer func() { _ = c.uow.Rollback(ctx) }()
	if ctx.Err() != nil {
		c.lost = true
		return // aborting: the rollback returns the batch untouched
	}
	items := b.lanes[0].items
	u.traced(ctx, items, func(ctx context.Context) UnitOfWorkEnd { return u.applyClaimed(ctx, items, c, b.renewals) })
}

// applyClaimed applies, returns and commits the claimed items in their
// unit of work; when it cannot commit as applied, it hands the batch to
// the lease path.
func (u *units) applyClaimed(ctx context.Context, items []*item, c *claimed, renewals *failures) UnitOfWorkEnd {
	began := time.Now()
	res, err := u.unitOfWork(ctx, items, c.uow)
	if err == nil {
		u.committed(ctx, res, began, 1)
		return UnitOfWorkEnd{Outcome: UnitCommitted, Attempts: 1}
	}
	var uc *uncertainCommit
	if !errors.As(err, &uc) {
		return u.unclaimed(ctx, c, err, renewals)
	}
	// The store kept the claim (the commit was refused and cannot have
	// landed), or the transaction ended: read it back.
	if leased, lerr := u.leaseClaim(ctx, c, err); lerr == nil {
		return u.leased(ctx, leased, renewals)
	}
	if !u.landed(ctx, uc) {
		return u.lost(ctx, c, err)
	}
	u.committed(ctx, uc.res, began, 1)
	return UnitOfWorkEnd{Outcome: UnitCommitted, Attempts: 1}
}

// unclaimed handles a claimed batch whose unit of work failed with err:
// when the store kept the claim, Lease turns it into a lease and the batch
// goes down the lease path; otherwise the claim went with the transaction.
func (u *units) unclaimed(ctx context.Context, c *claimed, err error, renewals *failures) UnitOfWorkEnd {
	items, lerr := u.leaseClaim(ctx, c, err)
	if lerr != nil {
		return u.lost(ctx, c, err)
	}
	return u.leased(ctx, items, renewals)
}

// leaseClaim turns the claim of a batch whose unit of work failed with
// err into a lease, and returns the batch's items with their leased
// deliveries.
func (u *units) leaseClaim(ctx context.Context, c *claimed, err error) ([]*item, error) {
	ds, lerr := c.uow.Lease(ctx)
	if lerr != nil {
		return nil, lerr
	}
	items := make([]*item, len(ds))
	for i, d := range ds {
		items[i] = u.plan.decode(d)
	}
	if errors.Is(err, store.ErrConflict) {
		u.obs.conflicted(items)
	}
	return items, nil
}

// leased runs a batch leased from its failed claim down the lease path,
// in the claim's slot, keeping its leases alive.
func (u *units) leased(ctx context.Context, items []*item, renewals *failures) UnitOfWorkEnd {
	ds := make([]transport.Delivery, len(items))
	for i, it := range items {
		ds[i] = it.d
	}
	r := u.caps.leases.keep(ctx, ds, renewals)
	defer r.stop()
	end := u.runUnit(ctx, items)
	end.Attempts++
	return end
}

// lost reports a claimed batch whose claim went with its transaction: its
// messages are back in the queue untouched, as after a crash.
func (u *units) lost(ctx context.Context, c *claimed, err error) UnitOfWorkEnd {
	c.lost = true
	if ctx.Err() == nil {
		u.log.WarnContext(ctx, "claimed batch failed with its transaction; its messages are back in the queue untouched", "messages", c.n, "error", err)
	}
	return UnitOfWorkEnd{Outcome: UnitFailed, Attempts: 1, Err: err}
}

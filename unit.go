package idem

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemhq/idem/internal/backoff"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// units runs a batch's lanes as units of work: each lane waits for the
// earlier lanes holding its keys and for a slot, applies its messages in
// a unit of work (lane.go, steps.go), and commits; conflicts are applied
// again, split by key; a failed store is told apart from a bad message
// (storeFailed); a commit whose outcome is unknown is read back (landed).
// A unit of work that landed goes to the observers, then to settle.
type units struct {
	*base
	plan   *planner
	emit   emitter
	settle *settler
	order  *keyOrder     // nil: one consumer, or partitioned consumers
	slots  chan struct{} // one per unit of work open at once (Config.Lanes)
	slow   outlived      // messages whose unit of work outlived its lease
	holds  *holds        // nil: no admission beside a broker (flow_broker.go)
}

// runLanes runs a batch's lanes in parallel and waits for them. Each lane
// first waits for the earlier lanes that hold its keys, then for one of
// the engine's Config.Lanes slots, which every consumer shares: so the
// units of work open at once, and the connections they hold, never exceed
// Config.Lanes. (A lane takes its slot only after its predecessors ended,
// so a waiting lane never holds a slot an earlier one needs.)
func (u *units) runLanes(ctx context.Context, lanes []*laneRun) {
	if len(lanes) == 1 {
		u.runOrdered(ctx, lanes[0])
		return
	}
	var wg sync.WaitGroup
	for _, lr := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			u.runOrdered(ctx, lr)
		}()
	}
	wg.Wait()
}

// runOrdered runs one lane of a batch in its turn and slot.
func (u *units) runOrdered(ctx context.Context, lr *laneRun) {
	defer u.order.end(lr)
	lr.wait(ctx)
	u.slots <- struct{}{}
	defer func() { <-u.slots }()
	u.runLane(ctx, lr.items)
}

// runLane runs one unit of work (see runUnit) inside a unit-of-work span
// when a Tracer is set.
func (u *units) runLane(ctx context.Context, items []*item) UnitOfWorkEnd {
	return u.traced(ctx, items, func(ctx context.Context) UnitOfWorkEnd { return u.runUnit(ctx, items) })
}

// traced runs the unit of work of items (run) inside a unit-of-work span
// when a Tracer is set.
func (u *units) traced(ctx context.Context, items []*item, run func(context.Context) UnitOfWorkEnd) UnitOfWorkEnd {
	t := u.cfg.Tracer
	if t == nil {
		return run(ctx)
	}
	ctx, span := t.StartUnitOfWork(ctx, u.trace.uowStart(items))
	end := run(ctx)
	span.End(end)
	return end
}

// unitOfWork is one attempt of a lane's unit of work: begin, load, the
// steps of each message, collect, commit. With claim set it runs in that
// unit of work, which claimed its items: the messages to retry go back
// to the queue in the commit (Return), and the caller rolls it back,
// after Lease when the commit failed (claim.go). A lane of plain handlers reads
// its inbox and runs them before it begins: they do their own I/O, and no
// pooled connection should sit idle in a transaction while they call
// other services. Their inbox records commit afterwards; a crash in
// between runs them again (at least once).
func (u *units) unitOfWork(ctx context.Context, items []*item, claim store.ClaimUnitOfWork) (*laneResult, error) {
	began := time.Now()
	l := newLane(u.base, u.emit, items)
	handlers := handlersOnly(items)
	if handlers {
		if err := l.readInbox(ctx, items); err != nil {
			return nil, err
		}
		runSteps(ctx, l, items)
	}
	var uow store.UnitOfWork = claim
	if claim == nil {
		var err error
		if uow, err = u.store.Begin(ctx); err != nil {
			u.obs.ended(l.res.att, err) // the handlers' message spans
			return nil, &beginError{err}
		}
		defer func() { _ = uow.Rollback(ctx) }()
	}
	l.uow = uow
	if !handlers {
		if err := l.load(ctx, uow, items); err != nil {
			return nil, err
		}
		runSteps(ctx, l, items)
	}
	l.collect()
	if claim != nil {
		if err := l.returnRetries(ctx, claim); err != nil {
			u.obs.ended(l.res.att, err)
			return nil, err
		}
	}
	l.ch.ReleaseHolds = u.holds.of(items) // admitted beside a broker: released with the outcome
	res, err := l.commit(ctx, len(items))
	if err == nil && claim == nil {
		u.release(items)
	}
	u.obs.ended(l.res.att, err)
	if errors.Is(err, transport.ErrLeaseLost) {
		err = &leaseLost{err: err, slow: l.slowest, took: l.slowestTook, unit: time.Since(began)}
	}
	return res, err
}

// release stops renewing the leases of a committed unit of work's
// deliveries: consumed by the commit on the store's own queue, or about
// to be settled (lease.go).
func (u *units) release(items []*item) {
	u.caps.leases.releaseItems(items)
	u.holds.released(items)
}

// handlersOnly reports whether every item goes to a plain handler (the
// planner gives handlers lanes of their own).
func handlersOnly(items []*item) bool {
	for _, it := range items {
		if it.h == nil || it.reason != "" {
			return false
		}
	}
	return len(items) > 0
}

var conflictPause = backoff.Policy{Base: 2 * time.Millisecond, Max: 250 * time.Millisecond}

// runUnit commits the lane's unit of work, re-applying it after conflicts,
// and reports how it ended. After the first conflict a lane with several
// keys is split into one unit of work per key, so one contended key does
// not hold back the others. Other failures go to storeFailed.
func (u *units) runUnit(ctx context.Context, items []*item) UnitOfWorkEnd {
	if u.setAside(ctx, items) {
		return UnitOfWorkEnd{Outcome: UnitSplit, Attempts: 1}
	}
	for attempt := 1; ; attempt++ {
		began := time.Now()
		res, err := u.unitOfWork(ctx, items, nil)
		if err == nil {
			u.committed(ctx, res, began, attempt)
			return UnitOfWorkEnd{Outcome: UnitCommitted, Attempts: attempt}
		}
		switch {
		case errors.Is(err, store.ErrConflict) && attempt <= u.cfg.ConflictRetries:
			u.obs.conflicted(items)
			if groups := splitByKey(items); len(groups) > 1 {
				for _, g := range groups {
					u.runLane(ctx, g)
				}
				return UnitOfWorkEnd{Outcome: UnitSplit, Attempts: attempt, Err: err}
			}
			if !sleepCtx(ctx, conflictPause.Delay(attempt)) {
				// Stopping: the leases expire and the transport redelivers.
				return UnitOfWorkEnd{Outcome: UnitStopped, Attempts: attempt, Err: err}
			}
			continue
		case errors.Is(err, transport.ErrLeaseLost):
			u.leaseLost(ctx, items, err)
			return UnitOfWorkEnd{Outcome: UnitLeaseLost, Attempts: attempt, Err: err}
		}
		var uc *uncertainCommit
		if errors.As(err, &uc) && u.landed(ctx, uc) {
			u.committed(ctx, uc.res, began, attempt)
			return UnitOfWorkEnd{Outcome: UnitCommitted, Attempts: attempt}
		}
		if u.storeFailed(ctx, items, err) {
			return UnitOfWorkEnd{Outcome: UnitSplit, Attempts: attempt, Err: err}
		}
		return UnitOfWorkEnd{Outcome: UnitFailed, Attempts: attempt, Err: err}
	}
}

// leaseLost reports a unit of work refused at commit because its leases
// ran out, and remembers its slowest message when that message took most
// of its time (outlived.go).
func (u *units) leaseLost(ctx context.Context, items []*item, err error) {
	u.obs.leaseLost(items)
	args := []any{"messages", len(items), "error", err}
	var ll *leaseLost
	if errors.As(err, &ll) && ll.slow != nil {
		u.slow.note(ll)
		args = append(args, "unit_of_work_took", ll.unit, logMessageID, ll.slow.d.Envelope.ID, "message_took", ll.took)
	}
	u.log.WarnContext(ctx, "lease lost before commit; another consumer owns the messages", args...)
}

// committed observes a unit of work that landed, then settles it.
func (u *units) committed(ctx context.Context, res *laneResult, began time.Time, attempt int) {
	if res.returned > 0 {
		u.obs.retried(res.returned)
	}
	u.obs.committed(res.att, time.Since(began), attempt)
	u.settle.settle(ctx, res)
}

// storeFailed handles a unit of work that failed for a reason other than
// a conflict. Three cases:
//
//   - the store refused the data itself (store.ErrRejected): the same
//     data fails the same way, so the lane is split into one unit of work
//     per message, and the one message refused alone is dead-lettered
//     with a reason naming what was refused;
//   - the store could not even begin (it is down or unreachable), or it
//     refuses writes (store.ErrReadOnly, a failover): every message goes
//     back with backoff and nothing is dead-lettered;
//   - any other store error: the messages go back with backoff, and once
//     one of them has used up Config.MaxAttempts the lane is split, so
//     that a message whose unit of work keeps failing alone is
//     dead-lettered (ReasonRetriesExhausted). The dead letter's own commit
//     tells a broken database apart from a broken message: when the
//     database cannot commit that either, the message goes back again.
//
// It reports whether it handed the messages to new units of work.
func (u *units) storeFailed(ctx context.Context, items []*item, err error) bool {
	var be *beginError
	rejected := errors.Is(err, store.ErrRejected)
	exhausted := slices.ContainsFunc(items, func(it *item) bool { return it.d.Attempt >= u.cfg.MaxAttempts })
	switch {
	case ctx.Err() != nil, errors.As(err, &be), errors.Is(err, store.ErrConflict), errors.Is(err, store.ErrReadOnly), items[0].reason != "" && len(items) == 1:
		// Stopping, the store is unreachable or refuses writes (a
		// failover: store.ErrReadOnly), a key too contended for
		// Config.ConflictRetries (nothing is wrong with its messages), or
		// even a dead letter failed.
	case len(items) > 1 && (rejected || exhausted):
		u.log.WarnContext(ctx, "unit of work failed; retrying its messages one by one", "messages", len(items), "error", err)
		u.oneByOne(ctx, items)
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
		u.runLane(ctx, items)
		return true
	}
	// A transient store error, or a commit whose outcome stayed unknown:
	// the redelivery finds the inbox records if the commit happened.
	u.log.ErrorContext(ctx, "unit of work failed; returning messages to the transport", "messages", len(items), "error", err)
	for _, it := range items {
		u.settle.nack(ctx, it.d, u.retry.Delay(it.d.Attempt))
	}
	return false
}

// oneByOne runs each item in a unit of work of its own, in order. Once a
// message of a saga key was not committed, the later messages of that key
// go back to the transport unapplied, so arrival order holds.
func (u *units) oneByOne(ctx context.Context, items []*item) {
	held := map[store.Key]bool{}
	for _, it := range items {
		if it.reason == "" && it.h == nil && held[it.sagaKey()] {
			u.settle.nack(ctx, it.d, u.retry.Delay(it.d.Attempt))
			continue
		}
		if end := u.runLane(ctx, []*item{it}); end.Outcome != UnitCommitted && it.reason == "" && it.h == nil {
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
func (u *units) landed(ctx context.Context, uc *uncertainCommit) bool {
	if len(uc.inbox) == 0 && len(uc.dead) == 0 {
		return false
	}
	for try := 1; try <= landedTries; try++ {
		ok, err := u.readBack(ctx, uc)
		if err == nil {
			if ok {
				u.log.WarnContext(ctx, "commit reported an error but its records are in the store: settling as committed", "error", uc.err)
			}
			return ok
		}
		if !sleepCtx(ctx, u.retry.Delay(try)) {
			return false
		}
	}
	return false
}

func (u *units) readBack(ctx context.Context, uc *uncertainCommit) (bool, error) {
	if len(uc.inbox) == 0 {
		dl, err := u.store.GetDeadLetter(ctx, uc.dead[0])
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		// A dead letter kept from before, whose replay is still pending,
		// is not this commit's: a landed one would have settled it.
		return err == nil && !replayPending(dl), err
	}
	uow, err := u.store.Begin(ctx)
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

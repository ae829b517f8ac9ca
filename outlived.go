package idem

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/store"
)

// When a batch's leases cannot be kept alive (the transport cannot extend
// them, or extending failed), a message slower than the lease has its
// unit of work refused at commit as "lease lost", and its batch is
// handed out again, batch mates and all. The units bound the damage:
//
//   - the unit of work that lost its lease remembers its slowest message,
//     when that message took most of its time (outlived.note);
//   - a later lane that holds a remembered message runs its batch mates
//     on other keys first, in a unit of work of their own, and the slow
//     message with the other messages of its key (earlier and later, in
//     arrival order, so that one given back holds back those after it)
//     alone after them (units.setAside), so that the batch mates commit;
//   - a remembered message handed out Config.MaxAttempts times or more is
//     dead-lettered (ReasonRetriesExhausted) without running again, with
//     an error that names the lease.
//
// The memory is this process's: another process learns a slow message
// when it runs it once. It holds at most outlivedCap messages, each for
// outlivedTTL.

const (
	outlivedCap = 1024
	outlivedTTL = time.Hour
)

// outlived is the units' memory of messages whose unit of work outlived
// its lease. The zero value is ready; it is safe for concurrent use.
type outlived struct {
	n  atomic.Int32 // len(m), read without the lock on the hot path
	mu sync.Mutex
	m  map[string]outlivedRun // by message dedup identity
}

// outlivedRun is the last run of a message that outlived its lease.
type outlivedRun struct {
	took, unit time.Duration // the message's run, and its unit of work's
	at         time.Time
}

// leaseLost is a unit of work refused at commit because its leases ran
// out; it names the lane's slowest message.
type leaseLost struct {
	err        error
	slow       *item
	took, unit time.Duration
}

func (e *leaseLost) Error() string { return e.err.Error() }
func (e *leaseLost) Unwrap() error { return e.err }

// note remembers the slowest message of a unit of work that lost its
// leases, when it took more than half the unit of work's time.
func (o *outlived) note(ll *leaseLost) {
	if ll.slow == nil || ll.took*2 < ll.unit {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.m == nil {
		o.m = map[string]outlivedRun{}
	}
	now := time.Now()
	if len(o.m) >= outlivedCap {
		o.evict(now)
	}
	o.m[ll.slow.msgID] = outlivedRun{took: ll.took, unit: ll.unit, at: now}
	o.n.Store(int32(len(o.m)))
}

// evict drops the expired entries, or the oldest when none has; o.mu is
// held.
func (o *outlived) evict(now time.Time) {
	oldest, at := "", now
	for id, r := range o.m {
		if now.Sub(r.at) > outlivedTTL {
			delete(o.m, id)
		} else if r.at.Before(at) {
			oldest, at = id, r.at
		}
	}
	if len(o.m) >= outlivedCap {
		delete(o.m, oldest)
	}
}

// run returns what is remembered of it.
func (o *outlived) run(it *item) (outlivedRun, bool) {
	if o.n.Load() == 0 {
		return outlivedRun{}, false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	r, ok := o.m[it.msgID]
	if ok && time.Since(r.at) > outlivedTTL {
		delete(o.m, it.msgID)
		o.n.Store(int32(len(o.m)))
		return outlivedRun{}, false
	}
	return r, ok
}

// forget drops it from the memory, once it is dead-lettered.
func (o *outlived) forget(it *item) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.m, it.msgID)
	o.n.Store(int32(len(o.m)))
}

// setAside splits a lane that holds a message remembered as slow: it runs
// the messages of the other keys first in a unit of work of their own,
// then each slow message with the other messages of its key, alone (see
// splitSlow). A slow message handed out Config.MaxAttempts times or more
// is marked to be dead-lettered. It reports whether it ran the lane.
func (u *units) setAside(ctx context.Context, items []*item) bool {
	if u.slow.n.Load() == 0 {
		return false
	}
	rest, groups := u.splitSlow(items)
	if len(groups) == 0 || len(rest) == 0 && len(groups) == 1 {
		return false // nothing to set aside, or the lane is one slow message and its key's
	}
	u.log.WarnContext(ctx, "running the batch mates of messages that outlived their lease first, and those messages alone", "messages", len(items), "set_aside", len(groups))
	if len(rest) > 0 {
		u.runLane(ctx, rest)
	}
	for _, g := range groups {
		u.runLane(ctx, g)
	}
	return true
}

// splitSlow parts a lane into the messages of keys with no slow message
// (rest) and one group for each key that has one (a slow plain handler
// message is a group alone). A group holds every message of its key, the
// earlier ones included, in arrival order: within one unit of work an
// earlier message given back holds back the later ones (lane.blocked),
// and across two units nothing would, so the slow message could commit
// ahead of an earlier message of its key.
func (u *units) splitSlow(items []*item) (rest []*item, groups [][]*item) {
	slowKeys := map[store.Key]int{} // the group of each key set aside, -1 until made
	alone := map[*item]bool{}
	for _, it := range items {
		r, ok := u.slow.run(it)
		if !ok || it.reason != "" {
			continue
		}
		u.exhaust(it, r)
		if it.h != nil {
			alone[it] = true
		} else {
			slowKeys[it.sagaKey()] = -1
		}
	}
	for _, it := range items {
		g, ok := slowKeys[it.sagaKey()]
		switch {
		case alone[it]:
			groups = append(groups, []*item{it})
		case !ok || it.h != nil:
			rest = append(rest, it)
		case g < 0:
			slowKeys[it.sagaKey()] = len(groups)
			groups = append(groups, []*item{it})
		default:
			groups[g] = append(groups[g], it)
		}
	}
	return rest, groups
}

// exhaust marks a slow message handed out Config.MaxAttempts times or
// more to be dead-lettered without running again.
func (u *units) exhaust(it *item, r outlivedRun) {
	if it.d.Attempt < u.cfg.MaxAttempts {
		return
	}
	it.late = true
	it.reason = ReasonRetriesExhausted
	it.badErr = fmt.Errorf("handed out %d times without its unit of work settling: it ran for %v of its unit of work's %v, and the transport's lease ran out first; "+
		"make the handler faster, or the lease longer (pgstore/sqlitestore Config.Lease, NATS AckWait), or use a transport that extends leases", it.d.Attempt, r.took.Round(time.Millisecond), r.unit.Round(time.Millisecond))
	u.slow.forget(it)
}

package memtransport

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/transport"
)

var _ transport.LeaseExtender = (*Transport)(nil)

// LeaseDuration is Config.Lease (transport.LeaseExtender).
func (t *Transport) LeaseDuration() time.Duration { return t.lease }

// ExtendLeases keeps each delivery of ds in flight for another Config.Lease
// from now. A delivery whose lease expired but that was not handed out
// again yet is taken back in flight; one handed out again returns an error
// wrapping transport.ErrLeaseLost; a settled one is ignored.
func (t *Transport) ExtendLeases(_ context.Context, ds []transport.Delivery) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("memtransport: extend leases: %w", transport.ErrClosed)
	}
	deadline := time.Now().Add(t.lease)
	var errs []error
	for i := range ds {
		e, _, err := t.lookupLocked("extend lease of", &ds[i])
		switch {
		case err != nil:
			errs = append(errs, err)
		case e == nil || !e.open:
		case e.state == stateInFlight:
			e.deadline = deadline
			heap.Fix(&t.timed, e.index)
		default: // expired, and ready to be handed out again
			t.detachLocked(e)
			e.state, e.deadline = stateInFlight, deadline
			heap.Push(&t.timed, e)
			t.nInFly++
		}
	}
	t.armTimerLocked()
	return errors.Join(errs...)
}

package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/transport"
)

var _ transport.LeaseExtender = (*Transport)(nil)

// LeaseDuration is Config.Lease (transport.LeaseExtender).
func (t *Transport) LeaseDuration() time.Duration { return t.cfg.Lease }

// ExtendLeases starts the lease of each delivery of ds again: the lease
// is the transport's own (the broker holds an unacknowledged delivery for
// as long as its channel lives), so extending it sends nothing. A
// delivery requeued since (its lease expired, or its connection closed)
// returns an error wrapping transport.ErrLeaseLost; a settled delivery is
// ignored. The broker's consumer_timeout (30 minutes by default) still
// bounds how long a delivery may stay unacknowledged: past it the broker
// closes the channel, and the deliveries come back.
func (t *Transport) ExtendLeases(_ context.Context, ds []transport.Delivery) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return transport.ErrClosed
	}
	now := time.Now()
	var errs []error
	for _, d := range ds {
		in, ok := t.pending[d.Token]
		switch {
		case ok && !in.sess.isDead():
			in.out = now
		case ok:
			errs = append(errs, fmt.Errorf("rabbitmq: extend lease of delivery %s: %w (its connection closed and the broker requeued the message)", d.Token, transport.ErrLeaseLost))
		default:
			if _, lost := t.lost[d.Token]; lost {
				errs = append(errs, fmt.Errorf("rabbitmq: extend lease of delivery %s: %w (the lease expired or the connection closed, and the broker requeued the message)", d.Token, transport.ErrLeaseLost))
			}
		}
	}
	return errors.Join(errs...)
}

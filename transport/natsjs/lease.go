package natsjs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/transport"
)

var _ transport.LeaseExtender = (*Transport)(nil)

// LeaseDuration is Config.AckWait, the consumer's lease
// (transport.LeaseExtender).
func (t *Transport) LeaseDuration() time.Duration { return t.cfg.AckWait }

// ExtendLeases tells the server that ds are still being worked on
// (JetStream's in-progress acknowledgement, Msg.InProgress), which starts
// their AckWait again, and waits until the server has received it. The
// client-side fence moves with it: the new lease is counted from when the
// progress was sent. A delivery handed out again since, or whose lease is
// (nearly) expired, is not extended and its error wraps
// transport.ErrLeaseLost; a settled delivery is ignored. Errors of several
// deliveries are joined.
func (t *Transport) ExtendLeases(ctx context.Context, ds []transport.Delivery) error {
	if t.cfg.PublishOnly {
		return ErrPublishOnly
	}
	if t.isClosed() {
		return transport.ErrClosed
	}
	return t.sendEach(ctx, "lease extensions", ds, t.extend)
}

// extend sends the in-progress acknowledgement of d, under the fence of
// fenceLocked, and reports whether it sent one.
func (t *Transport) extend(d transport.Delivery) (bool, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	l, _, err := t.fenceLocked("extend lease of", d)
	if err != nil || l == nil {
		return false, err
	}
	// Sent under t.mu, so that no Ack or Nack of d goes out in between.
	if err := l.msg.InProgress(); err != nil {
		if errors.Is(err, jetstream.ErrMsgAlreadyAckd) {
			return false, nil
		}
		return false, t.closedOr(fmt.Errorf("natsjs: extend lease of %s: %w", d.Envelope.ID, err))
	}
	l.deadline = now.Add(t.cfg.AckWait)
	return true, nil
}

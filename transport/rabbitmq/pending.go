package rabbitmq

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Pending counts the namespace's messages waiting to be handed out and the
// deliveries this Transport has handed out and not settled
// (transport.PendingCounter).
//
// ready is the number of messages ready for delivery in the partition
// queues and the delay queues (a delayed message is ready in its delay
// queue until its TTL sends it back), as a passive queue.declare reports
// them, plus the messages this Transport has prefetched from the broker
// and not yet handed out (the broker counts those as unacknowledged); the
// dead-letter queue is not counted. unacked is the number of deliveries
// Receive has handed out and that are not yet settled nor past their
// lease.
//
// AMQP 0-9-1 does not tell a client how many messages other connections
// hold unacknowledged, so neither count includes the deliveries other
// connections hold or prefetched. Those return to ready when their channel
// closes (the process stopped or died) or their holder's lease expires; a
// count of everything left in the namespace is therefore ready once every
// other consumer has stopped. After Close, Pending returns
// transport.ErrClosed.
func (t *Transport) Pending(ctx context.Context) (ready, unacked int, err error) {
	s, err := t.current(ctx)
	if err != nil {
		return 0, 0, err
	}
	queues := t.Queues()
	for _, b := range delayBuckets {
		queues = append(queues, t.delayQueue(b.Milliseconds()))
	}
	var ch *amqp.Channel
	defer func() {
		if ch != nil {
			_ = ch.Close()
		}
	}()
	for _, q := range queues {
		if err := ctx.Err(); err != nil {
			return 0, 0, err
		}
		if ch == nil {
			if ch, err = s.conn.Channel(); err != nil {
				return 0, 0, fmt.Errorf("rabbitmq: opening a channel to count messages: %w", err)
			}
		}
		// A passive declare of a missing queue (a delay bucket never
		// used) closes the channel with 404: the next queue gets a new one.
		st, err := ch.QueueDeclarePassive(q, true, false, false, false, nil)
		var ae *amqp.Error
		switch {
		case err == nil:
			ready += st.Messages
		case errors.As(err, &ae) && ae.Code == amqp.NotFound:
			ch = nil
		default:
			return 0, 0, fmt.Errorf("rabbitmq: counting the messages of %s: %w", q, err)
		}
	}
	t.mu.Lock()
	unacked = len(t.pending)
	for _, p := range t.parts {
		ready += len(p)
	}
	t.mu.Unlock()
	return ready, unacked, nil
}

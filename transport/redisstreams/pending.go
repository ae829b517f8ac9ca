package redisstreams

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/transport"
)

// Pending counts the namespace's messages, in every process, from one
// atomic snapshot of the server: ready is the number waiting to be handed
// out (unread, or delayed by a Nack until they fall due), unacked the
// number handed out and not yet settled (the consumer group's pending
// entries, whoever holds them, including those whose holder died and
// whose lease has not been reclaimed yet).
func (t *Transport) Pending(ctx context.Context) (ready, unacked int, err error) {
	if t.isClosed() {
		return 0, 0, transport.ErrClosed
	}
	var n []int64
	err = t.do(ctx, "pending", 0, func(ctx context.Context) error {
		var err error
		n, err = pendingScript.Run(ctx, t.rdb, t.streams, group).Int64Slice()
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	if len(n) != 2 {
		return 0, 0, fmt.Errorf("redisstreams: pending script returned %d values, want 2", len(n))
	}
	return int(n[0]), int(n[1]), nil
}

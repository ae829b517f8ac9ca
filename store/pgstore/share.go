package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/transport"
)

var _ transport.SharedConsumer = (*Store)(nil)

// ReceiveShare is Receive restricted to a replica's share of the queue
// (transport.SharedConsumer), read from share before each claim: the
// messages of partition Part of Parts (as ReceivePartition), or, when it
// has none visible, any visible for StealAfter or longer. It waits as
// Receive does, until the next time it could claim any of them.
func (s *Store) ReceiveShare(ctx context.Context, n int, share func() transport.Share) ([]transport.Delivery, error) {
	n = max(n, 1)
	s.startListener()
	return s.poller().Receive(ctx, "pgstore: receive", nil, func(ctx context.Context) ([]transport.Delivery, time.Time, error) {
		sh := share()
		if sh.Parts >= 2 && (sh.Part < 0 || sh.Part >= sh.Parts) {
			return nil, time.Time{}, fmt.Errorf("pgstore: receive share: partition %d of %d: want 0 <= part < parts", sh.Part, sh.Parts)
		}
		if sh.StealAfter < 0 {
			return nil, time.Time{}, fmt.Errorf("pgstore: receive share: StealAfter %v is negative", sh.StealAfter)
		}
		return s.claimShare(ctx, n, sh)
	})
}

// claimShare runs one claim of ReceiveShare (receiveSQL with its steal).
func (s *Store) claimShare(ctx context.Context, n int, sh transport.Share) ([]transport.Delivery, time.Time, error) {
	steal := sh.StealAfter.Seconds()
	ds, next, err := s.claim(ctx, n, sh.Part, sh.Parts, &steal)
	return ds, nextTime(next), err
}

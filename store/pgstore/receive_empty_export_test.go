package pgstore

import (
	"context"
	"time"

	"github.com/idemhq/idem/transport"
)

// TakeOnce runs one take of ReceivePartition (max messages of partition
// part of parts), without its wait: the deliveries, or when none the time
// the next message of the partition becomes visible (zero when none).
func TakeOnce(ctx context.Context, s *Store, max, part, parts int) ([]transport.Delivery, time.Time, error) {
	ds, next, err := s.claim(ctx, max, part, parts, nil)
	return ds, nextTime(next), err
}

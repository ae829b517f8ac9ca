package admit

import (
	"time"

	"github.com/idemhq/idem/store"
)

// Idle is a counter that a sweep looks at, as a store keeps it.
type Idle struct {
	// Bucket reports that the counter keeps a bucket: Tokens at
	// RefilledAt.
	Bucket     bool
	Tokens     float64
	RefilledAt time.Time
	// UsedAt is when an admission last decided on it (RefilledAt for a
	// bucket); zero when unknown, which counts as long ago.
	UsedAt time.Time
	// Limit is the limit in force as the store knows it; nil: none.
	Limit *store.Limit
}

// Sweepable reports whether a counter without a live hold may be deleted
// at now (store.Limiter.SweepCounters): unused for longer than idle, and
// its bucket full under the limit in force, or no bucket in force (none
// kept, or no rate in force). A deleted counter starts again as a new
// one, with a full bucket: deleting one that is full changes no decision.
func Sweepable(c Idle, now time.Time, idle time.Duration) bool {
	if !c.UsedAt.IsZero() && now.Sub(c.UsedAt) <= idle {
		return false
	}
	if !c.Bucket || c.Limit == nil || c.Limit.Rate <= 0 {
		return true
	}
	return Refilled(*c.Limit, c.Tokens, c.RefilledAt, now) >= c.Limit.BucketSize()-epsilon
}

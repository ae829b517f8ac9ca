package idem

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/idemhq/idem/store"
)

// limitsDeclarer is the service that records the engine's declared limits
// in the store again every declareEvery (store.Limiter.DeclareLimits,
// one call), so that a declaration's UpdatedAt is the last time a running
// engine declared it: the operator's tools mark one older than
// store.DeclarationStale, and the sweeper forgets one older than
// forgetDeclarationsAfter. It runs only on an engine with Limits.
type limitsDeclarer struct {
	*base
	adm   *admission
	fails *failures
}

// declareEvery is the pause between two declarations of an engine's
// limits: Config.HeartbeatInterval, at most store.DeclarationRefresh (the
// bound every other process relies on).
func declareEvery(c *Config) time.Duration {
	return min(c.HeartbeatInterval, store.DeclarationRefresh)
}

// forgetDeclarationsAfter is how long the sweeper keeps a declaration that
// no running engine refreshes: Config.LimitCounterIdle, and at least ten
// refreshes of any engine (10 × store.DeclarationRefresh), whatever the
// HeartbeatInterval of the engines sharing the store, so that a replica
// that is slow, or cut off from the store for a while, does not see its
// limits vanish from the operator's tools.
func forgetDeclarationsAfter(c *Config) time.Duration {
	return max(c.LimitCounterIdle, 10*store.DeclarationRefresh)
}

func newLimitsDeclarer(b *base, adm *admission) *limitsDeclarer {
	return &limitsDeclarer{base: b, adm: adm, fails: newFailures(b, slog.LevelWarn, "recording the declared limits in the store failed; the operator's tools may mark them as not declared by a running engine")}
}

// run declares the limits again every declareEvery until ctx ends.
func (d *limitsDeclarer) run(ctx context.Context) error {
	repeat(ctx, declareEvery(&d.cfg), func(ctx context.Context) {
		err := d.adm.record(ctx)
		if ctx.Err() != nil || (err != nil && errors.Is(err, context.Canceled)) {
			return
		}
		d.fails.report(ctx, err)
	})
	return nil
}

package redisstreams

import (
	"context"
	_ "embed" // the extend script
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idemhq/idem/transport"
)

var _ transport.LeaseExtender = (*Transport)(nil)

var (
	//go:embed lua/extend.lua
	extendLua    string
	extendScript = redis.NewScript(extendLua)
)

// LeaseDuration is Config.Lease (transport.LeaseExtender).
func (t *Transport) LeaseDuration() time.Duration { return t.cfg.Lease }

// ExtendLeases renews the leases of ds while the engine still works on
// them: in one script, each delivery that the server still records as
// this one (same consumer, same delivery count) is claimed again by its
// holder with XCLAIM … JUSTID, which resets the idle time that XAUTOCLAIM
// measures the lease by, by the server's clock, and leaves the delivery
// count alone. A delivery whose entry was handed out again is left
// untouched and its error wraps transport.ErrLeaseLost; a settled or
// nacked delivery is ignored. While the server cannot be reached it waits
// for it, for up to Config.Lease.
func (t *Transport) ExtendLeases(ctx context.Context, ds []transport.Delivery) error {
	if t.isClosed() {
		return transport.ErrClosed
	}
	return t.fencedRun(ctx, "extend lease", ds, t.extend)
}

// extend runs the extend script for ds and returns one result per
// delivery.
func (t *Transport) extend(ctx context.Context, ds []transport.Delivery) ([]string, error) {
	keys := make([]string, 0, len(ds))
	args := make([]any, 0, 1+3*len(ds))
	args = append(args, group)
	for _, d := range ds {
		tk, err := t.parseToken(d)
		if err != nil {
			return nil, err
		}
		keys = append(keys, t.streams[tk.part])
		args = append(args, tk.entry, tk.consumer, tk.count)
	}
	res, err := extendScript.Run(ctx, t.rdb, keys, args...).StringSlice()
	if err != nil {
		return nil, err
	}
	if len(res) != len(ds) {
		return nil, fmt.Errorf("extend script returned %d results for %d deliveries", len(res), len(ds))
	}
	return res, nil
}

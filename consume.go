package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/idemhq/idem/transport"
)

// consumer is one of the engine's Config.Consumers loops: the one consume
// loop. It takes a batch from its source, has the planner deal it to
// lanes, and runs the lanes (units); then it takes the next. The source
// is pluggable:
//
//   - receive: Transport.Receive (leased deliveries), or
//     PartitionedConsumer.ReceivePartition for one partition of the keys;
//   - claim (claim.go): on the store's own queue, while batches come back
//     full, the batch is claimed inside the unit of work that applies it.
//
// Consumers that share one stream take turns under the key order
// (order.go): a consumer receives and registers its batch's keys in its
// turn, so that per-key order holds across them.
type consumer struct {
	*base
	plan    *planner
	units   *units
	receive func(ctx context.Context, max int) ([]transport.Delivery, error)
	claim   *claimSource // nil: the consumer never claims
	// fails paces and logs failed receives; renewals logs failed lease
	// extensions (lease.go).
	fails, renewals *failures
}

// run takes and runs batches until loopCtx ends; work in flight runs in
// workCtx, which outlives loopCtx until Stop gives up on it.
func (c *consumer) run(loopCtx, workCtx context.Context) error {
	backlog := false
	for {
		if backlog && c.claim != nil && loopCtx.Err() == nil && c.claim.run(workCtx) == c.cfg.BatchSize {
			continue
		}
		lanes, ds, err, ok := c.take(loopCtx)
		if !ok {
			return nil
		}
		backlog = len(ds) == c.plan.fetchSize()
		if len(lanes) > 0 {
			r := c.caps.leases.keep(workCtx, ds, c.renewals)
			c.units.runLanes(workCtx, lanes)
			r.stop()
		}
		if stop, ferr := c.received(loopCtx, err); stop {
			return ferr
		}
	}
}

// take receives a batch and plans it: with a key order, in the consumer's
// turn, registering its lanes' keys before the next consumer's receive.
// ok is false when loopCtx ended while the consumer waited for its turn.
func (c *consumer) take(loopCtx context.Context) (lanes []*laneRun, ds []transport.Delivery, err error, ok bool) {
	o := c.units.order
	if o != nil {
		select {
		case o.turn <- struct{}{}:
		case <-loopCtx.Done():
			return nil, nil, nil, false
		}
		defer func() { <-o.turn }()
	}
	ds, err = c.receive(loopCtx, c.plan.fetchSize())
	if len(ds) > 0 {
		lanes = o.register(c.plan.plan(ds))
	}
	return lanes, ds, err, true
}

// received decides what a consumer does after a receive whose deliveries
// (if any) it has processed: stop (with the error that ends the engine,
// if any), or receive again, after a pause when the receive failed. The
// pause grows while receives keep failing, and a failure that repeats is
// logged once with a count (failures).
func (c *consumer) received(loopCtx context.Context, err error) (stop bool, fatal error) {
	switch {
	case loopCtx.Err() != nil:
		return true, nil
	case err == nil:
		c.fails.ok(loopCtx)
		return false, nil
	case errors.Is(err, transport.ErrClosed):
		return true, fmt.Errorf("idem: consume: %w", err)
	}
	return !sleepCtx(loopCtx, c.fails.failed(loopCtx, err)), nil
}

// consumers makes the engine's Config.Consumers loops: on partitions of
// the keys with Config.PartitionedReceive, otherwise taking turns on one
// stream under the units' key order (one consumer needs none). Each
// claims inside units of work when claim is set.
func consumers(b *base, plan *planner, u *units, claim bool) []*consumer {
	n := b.cfg.Consumers
	mk := func(receive func(context.Context, int) ([]transport.Delivery, error), part, parts int) *consumer {
		c := &consumer{base: b, plan: plan, units: u, receive: receive,
			fails: newFailures(b, slog.LevelError, "receive failed"), renewals: newFailures(b, slog.LevelWarn, "lease extension failed; the batch may be handed out again")}
		if claim && u.order == nil {
			c.claim = &claimSource{base: b, plan: plan, units: u, part: part, parts: parts}
		}
		return c
	}
	var out []*consumer
	switch pc := b.caps.partitioned; {
	case pc != nil && b.cfg.PartitionedReceive && n > 1:
		for part := range n {
			out = append(out, mk(func(ctx context.Context, max int) ([]transport.Delivery, error) {
				return pc.ReceivePartition(ctx, max, part, n)
			}, part, n))
		}
	default:
		for range n {
			out = append(out, mk(b.tr.Receive, 0, 1))
		}
	}
	return out
}

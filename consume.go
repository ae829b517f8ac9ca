package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/idemhq/idem/transport"
)

// consumer is one of the engine's Config.Consumers loops: the one consume
// loop. It takes a batch from its source (source.go), has the planner
// deal it to lanes, and has the units run it; then it takes the next.
//
// Consumers that share one stream take turns under the key order
// (order.go): a consumer takes and registers its batch's keys in its
// turn, so that per-key order holds across them.
type consumer struct {
	*base
	plan  *planner
	units *units
	src   *source
	// fails paces and logs failed receives; renewals logs failed lease
	// extensions (lease.go).
	fails, renewals *failures
}

// run takes and runs batches until loopCtx ends; work in flight runs in
// workCtx, which outlives loopCtx until Stop gives up on it.
func (c *consumer) run(loopCtx, workCtx context.Context) error {
	for {
		b, err, ok := c.take(loopCtx, workCtx)
		if !ok {
			return nil
		}
		if len(b.lanes) > 0 {
			c.units.run(workCtx, &b)
		}
		c.src.ran(&b)
		if b.claim != nil {
			continue // a claim never fails the loop: it falls back to receive
		}
		if stop, ferr := c.received(loopCtx, err); stop {
			return ferr
		}
	}
}

// take takes a batch and plans it: with a key order, in the consumer's
// turn, registering its lanes' keys before the next consumer's take. ok
// is false when loopCtx ended while the consumer waited for its turn.
func (c *consumer) take(loopCtx, workCtx context.Context) (b batch, err error, ok bool) {
	o := c.units.order
	if o != nil {
		select {
		case o.turn <- struct{}{}:
		case <-loopCtx.Done():
			return batch{}, nil, false
		}
		defer func() { <-o.turn }()
	}
	b, err = c.src.take(loopCtx, workCtx, c.plan.fetchSize())
	b.renewals = c.renewals
	switch {
	case b.claim != nil:
		// One unit of work, whatever it holds: the claim's.
		b.lanes = o.register([][]*item{c.plan.decodeAll(b.ds)})
	case len(b.ds) > 0:
		b.lanes = o.register(c.plan.plan(b.ds))
	}
	return b, err, true
}

// received decides what a consumer does after a receive whose deliveries
// (if any) it has processed: stop (with the error that ends the engine,
// if any), or receive again, after a pause when the receive failed. The
// pause grows while receives keep failing, and a failure that repeats is
// logged once with a count (failures).
func (c *consumer) received(loopCtx context.Context, err error) (stop bool, fatal error) {
	if loopCtx.Err() == nil {
		c.health.receive(err)
	}
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
// stream under the units' key order (one consumer needs none): the
// replica's share of the queue when replicas split it (shares.go). Each
// claims inside units of work when claim is set, and receives through
// admission when adm is set (flow.go).
func consumers(b *base, plan *planner, u *units, claim bool, adm *admission) []*consumer {
	n := b.cfg.Consumers
	mk := func(receive func(context.Context, int) ([]transport.Delivery, error), part, parts int) *consumer {
		if adm != nil {
			receive = adm.receive(receive, part, parts)
		}
		c := &consumer{base: b, plan: plan, units: u, src: &source{receive: receive},
			fails: newFailures(b, slog.LevelError, "receive failed"), renewals: newFailures(b, slog.LevelWarn, "lease extension failed; the batch may be handed out again")}
		if claim && u.order == nil {
			c.src.claim = &claimer{base: b, slots: u.slots, part: part, parts: parts}
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
		receive := b.tr.Receive
		if b.shares != nil {
			receive = b.shares.receive
		}
		for range n {
			out = append(out, mk(receive, 0, 1))
		}
	}
	return out
}

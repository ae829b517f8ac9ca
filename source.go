package idem

import (
	"context"

	"github.com/idemhq/idem/transport"
)

// source is where a consumer takes its batches: the one way in for every
// batch, whatever the transport. It receives from the transport
// (Transport.Receive, or PartitionedConsumer.ReceivePartition for one
// partition of the keys), the deliveries leased; and on the store's own
// queue, while batches come back full, it claims the next batch inside
// the unit of work that will apply it (claimer, claim.go).
//
// Every batch then goes through the planner and one runner (units.run),
// claimed or leased alike: a concern that every batch must meet goes
// there, once.
type source struct {
	receive func(ctx context.Context, max int) ([]transport.Delivery, error)
	claim   *claimer // nil: the source never claims
	backlog bool     // the last batch came back full: claim the next
}

// batch is what a source hands out: leased deliveries, or deliveries
// claimed in an open unit of work that holds one of the Config.Lanes
// slots until the runner ends it.
type batch struct {
	ds    []transport.Delivery
	lanes []*laneRun
	full  bool // the source had more than it handed out, most likely
	claim *claimed
	// renewals logs the failed extensions of the batch's leases
	// (lease.go); the consumer's, which runs one batch at a time.
	renewals *failures
}

// take returns the next batch: claimed when the last one came back full
// and the claim finds any, otherwise received (at most max deliveries).
// A claimed batch's unit of work lives in workCtx; the receive waits in
// loopCtx.
func (s *source) take(loopCtx, workCtx context.Context, max int) (batch, error) {
	if s.backlog && s.claim != nil && loopCtx.Err() == nil {
		if b, ok := s.claim.take(workCtx); ok {
			return b, nil
		}
	}
	ds, err := s.receive(loopCtx, max)
	return batch{ds: ds, full: len(ds) == max}, err
}

// ran tells the source how its last batch ended: the next is claimed if
// it came back full, and its claim (if any) was not lost.
func (s *source) ran(b *batch) {
	s.backlog = b.full && (b.claim == nil || !b.claim.lost)
}

package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// listReplicas reads at most limit replicas and judges their state at now.
func (p *parts) listReplicas(ctx context.Context, limit int, now time.Time) (*ReplicaList, error) {
	rr := p.caps.replicas
	if rr == nil {
		return nil, errNoReplicas
	}
	rs, err := rr.Replicas(ctx, limit)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	out := &ReplicaList{Replicas: make([]Replica, 0, len(rs))}
	self := p.e.ReplicaID()
	states := replicaStates(rs, now)
	for i := range rs {
		x := toReplica(&rs[i], now)
		x.Self, x.State = x.ID == self, states[i]
		out.Counts.add(x.State)
		out.Replicas = append(out.Replicas, x)
	}
	return out, nil
}

// removeReplicas removes the records of the replicas that no longer run
// (gone, replaced or stopped) and last beat before every live replica
// did: store.ReplicaRegistry prunes by last beat, so a live replica's
// record is never removed.
func (p *parts) removeReplicas(ctx context.Context, now time.Time) (*RemovedReplicas, error) {
	rr := p.caps.replicas
	if rr == nil {
		return nil, errNoReplicas
	}
	rs, err := rr.Replicas(ctx, maxLimit)
	if err != nil {
		return nil, fmt.Errorf("list replicas: %w", err)
	}
	states := replicaStates(rs, now)
	before := now
	for i := range rs {
		if states[i] == store.ReplicaAlive && rs[i].BeatAt.Before(before) {
			before = rs[i].BeatAt
		}
	}
	out := &RemovedReplicas{}
	for i := range rs {
		if states[i] != store.ReplicaAlive && !rs[i].BeatAt.Before(before) {
			out.Left++
		}
	}
	if out.Removed, err = rr.PruneReplicas(ctx, before); err != nil {
		return nil, fmt.Errorf("remove replicas: %w", err)
	}
	return out, nil
}

// liveReplicas counts the replicas alive at now; nil when the store keeps
// no heartbeats or did not answer (logged).
func (p *parts) liveReplicas(ctx context.Context, now time.Time) *int {
	rr := p.caps.replicas
	if rr == nil {
		return nil
	}
	rs, err := rr.Replicas(ctx, maxLimit)
	if err != nil {
		p.log.WarnContext(ctx, "admin: list replicas", "error", err)
		return nil
	}
	n := 0
	for i := range rs {
		if rs[i].State(now) == store.ReplicaAlive {
			n++
		}
	}
	return &n
}

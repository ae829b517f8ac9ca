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
	if p.caps.replicaCounter != nil {
		if out.Counts, err = p.caps.countReplicas(ctx, now); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// countReplicas counts every replica record by state at now: in one read
// where the store can (readmodel.ReplicaCounter), else from the maxLimit
// most recently started records.
func (c *capabilities) countReplicas(ctx context.Context, now time.Time) (ReplicaCounts, error) {
	if rc := c.replicaCounter; rc != nil {
		n, err := rc.CountReplicas(ctx, now)
		if err != nil {
			return ReplicaCounts{}, fmt.Errorf("count replicas: %w", err)
		}
		return ReplicaCounts{Alive: n.Alive, Stopped: n.Stopped, Gone: n.Gone, Replaced: n.Replaced}, nil
	}
	rs, err := c.replicas.Replicas(ctx, maxLimit)
	if err != nil {
		return ReplicaCounts{}, fmt.Errorf("list replicas: %w", err)
	}
	var n ReplicaCounts
	for _, st := range replicaStates(rs, now) {
		n.add(st)
	}
	return n, nil
}

// removeRounds bounds how many lists removeReplicas reads: each round
// reads maxLimit records, so records past that many are reached once the
// rounds before have removed those in front of them.
const removeRounds = 100

// removeReplicas removes the records of the replicas that no longer run
// (gone, replaced or stopped): each exactly as it was judged (its ID and
// last beat; store.ReplicaRegistry.RemoveReplicas), so a live replica's
// record, or one that beat again since the list, is never removed.
func (p *parts) removeReplicas(ctx context.Context, now time.Time) (*RemovedReplicas, error) {
	rr := p.caps.replicas
	if rr == nil {
		return nil, errNoReplicas
	}
	out := &RemovedReplicas{}
	for range removeRounds {
		rs, err := rr.Replicas(ctx, maxLimit)
		if err != nil {
			return nil, fmt.Errorf("list replicas: %w", err)
		}
		marks := notRunning(rs, now)
		n, err := rr.RemoveReplicas(ctx, marks)
		if err != nil {
			return nil, fmt.Errorf("remove replicas: %w", err)
		}
		out.Removed, out.Left = out.Removed+n, out.Left+len(marks)-n
		if len(rs) < maxLimit || n == 0 {
			break
		}
	}
	return out, nil
}

// notRunning marks the replicas of rs that are not alive at now.
func notRunning(rs []store.Replica, now time.Time) []store.ReplicaMark {
	var out []store.ReplicaMark
	for i, st := range replicaStates(rs, now) {
		if st != store.ReplicaAlive {
			out = append(out, store.ReplicaMark{ID: rs[i].ID, BeatAt: rs[i].BeatAt})
		}
	}
	return out
}

// liveReplicas counts the replicas alive at now; nil when the store keeps
// no heartbeats or did not answer (logged).
func (p *parts) liveReplicas(ctx context.Context, now time.Time) *int {
	if p.caps.replicas == nil {
		return nil
	}
	c, err := p.caps.countReplicas(ctx, now)
	if err != nil {
		p.log.WarnContext(ctx, "admin: count replicas", "error", err)
		return nil
	}
	return &c.Alive
}

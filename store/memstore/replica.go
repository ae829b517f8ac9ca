package memstore

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ store.ReplicaRegistry = (*Store)(nil)

// Heartbeat creates or replaces the replica r.ID, unless the stored one has
// a later BeatAt.
func (s *Store) Heartbeat(ctx context.Context, r *store.Replica) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "heartbeat"); err != nil {
		return err
	}
	if old := s.replicas[r.ID]; old != nil && old.BeatAt.After(r.BeatAt) {
		return nil
	}
	if s.replicas == nil {
		s.replicas = make(map[string]*store.Replica)
	}
	c := cloneReplica(*r)
	s.replicas[r.ID] = &c
	return nil
}

// Replicas returns at most limit replicas, the most recently started first.
func (s *Store) Replicas(ctx context.Context, n int) ([]store.Replica, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "replicas"); err != nil {
		return nil, err
	}
	out := make([]store.Replica, 0, len(s.replicas))
	for _, r := range s.replicas {
		out = append(out, cloneReplica(*r))
	}
	slices.SortFunc(out, func(a, b store.Replica) int {
		return cmp.Or(b.StartedAt.Compare(a.StartedAt), strings.Compare(a.ID, b.ID))
	})
	if n = limit(n); len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// PruneReplicas deletes the replicas whose last beat is before before.
func (s *Store) PruneReplicas(ctx context.Context, before time.Time) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "prune replicas"); err != nil {
		return 0, err
	}
	n := 0
	for id, r := range s.replicas {
		if r.BeatAt.Before(before) {
			delete(s.replicas, id)
			n++
		}
	}
	return n, nil
}

// RemoveReplicas deletes the replicas named by marks whose last beat is
// still the mark's.
func (s *Store) RemoveReplicas(ctx context.Context, marks []store.ReplicaMark) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "remove replicas"); err != nil {
		return 0, err
	}
	n := 0
	for _, m := range marks {
		if r := s.replicas[m.ID]; r != nil && r.BeatAt.Equal(m.BeatAt) {
			delete(s.replicas, m.ID)
			n++
		}
	}
	return n, nil
}

func cloneReplica(r store.Replica) store.Replica {
	r.Config = maps.Clone(r.Config)
	r.Definitions = maps.Clone(r.Definitions)
	return r
}

var _ readmodel.ReplicaCounter = (*Store)(nil)

// CountReplicas counts every replica by its state at now.
func (s *Store) CountReplicas(ctx context.Context, now time.Time) (*readmodel.ReplicaCounts, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "count replicas"); err != nil {
		return nil, err
	}
	var c readmodel.ReplicaCounts
	var liveStart time.Time
	for _, r := range s.replicas {
		if r.State(now) == store.ReplicaAlive && r.StartedAt.After(liveStart) {
			liveStart = r.StartedAt
		}
	}
	for _, r := range s.replicas {
		switch r.State(now) {
		case store.ReplicaAlive:
			c.Alive++
		case store.ReplicaStopped:
			c.Stopped++
		case store.ReplicaGone:
			if r.BeatAt.Before(liveStart) {
				c.Replaced++
			} else {
				c.Gone++
			}
		}
	}
	return &c, nil
}

package store

import (
	"context"
	"time"
)

// States of a replica, as Replica.State reports them.
const (
	// ReplicaAlive is a replica whose last heartbeat is recent.
	ReplicaAlive = "alive"
	// ReplicaStopped is a replica that stopped cleanly: its last heartbeat
	// carried StoppedAt.
	ReplicaStopped = "stopped"
	// ReplicaGone is a replica that stopped beating without a clean stop
	// (it crashed, was killed or lost the store) for ReplicaGoneBeats of its
	// intervals.
	ReplicaGone = "gone"
)

// ReplicaGoneBeats is how many of its heartbeat intervals a replica may go
// without a beat before Replica.State calls it gone.
const ReplicaGoneBeats = 3

// DefaultReplicaInterval is the interval Replica.State assumes for a
// replica that reported none.
const DefaultReplicaInterval = 10 * time.Second

// Replica is one engine replica as its last heartbeat described it. Times
// are the replica's own clock.
type Replica struct {
	// ID identifies one run of one engine: a new random ID per start.
	ID string `json:"id"`
	// Host is the host name the replica runs on.
	Host string `json:"host"`
	// Version is the build the replica runs (module versions and VCS
	// revision, from the binary's build information).
	Version string `json:"version"`
	// StartedAt is when the engine started.
	StartedAt time.Time `json:"started_at"`
	// Config summarises the engine's settings (batch size, lanes, retry
	// policy, store and transport types, registered sagas): never secrets
	// or addresses. Nil when the replica reported none.
	Config map[string]string `json:"config,omitempty"`
	// Lanes and Consumers are the engine's parallelism (idem.Config).
	Lanes     int `json:"lanes"`
	Consumers int `json:"consumers"`
	// LastBatchAt is when the replica last committed a unit of work; zero
	// when it has not.
	LastBatchAt time.Time `json:"last_batch_at,omitzero"`
	// Lag is how far behind the replica was at its last committed unit of
	// work: the age of the oldest message in it (now minus its SentAt).
	Lag time.Duration `json:"lag"`
	// Interval is the replica's heartbeat interval.
	Interval time.Duration `json:"interval"`
	// BeatAt is the time of the last heartbeat.
	BeatAt time.Time `json:"beat_at"`
	// StoppedAt is when the replica stopped cleanly; zero while it runs
	// (or when it stopped without saying so).
	StoppedAt time.Time `json:"stopped_at,omitzero"`
	// Definitions maps each saga type the replica runs to the fingerprint
	// of its definition (see Definition), for the saga types it recorded
	// in a DefinitionStore. Nil when it reported none. Stores keep it
	// like Config.
	Definitions map[string]string `json:"definitions,omitempty"`
}

// State says whether the replica is alive, stopped (cleanly) or gone (no
// beat for ReplicaGoneBeats intervals) at now: one of ReplicaAlive,
// ReplicaStopped and ReplicaGone.
func (r *Replica) State(now time.Time) string {
	if !r.StoppedAt.IsZero() {
		return ReplicaStopped
	}
	iv := r.Interval
	if iv <= 0 {
		iv = DefaultReplicaInterval
	}
	if now.Sub(r.BeatAt) > ReplicaGoneBeats*iv {
		return ReplicaGone
	}
	return ReplicaAlive
}

// ReplicaRegistry is implemented by stores that keep the heartbeats of
// engine replicas (every bundled store does). Each running engine writes
// its Replica at a low fixed rate; operators' tools list them. The methods
// are safe for concurrent use and run outside any unit of work.
type ReplicaRegistry interface {
	// Heartbeat creates or replaces the replica r.ID with r, unless the
	// stored replica has a later BeatAt (a late beat never overwrites a
	// newer one, such as the final beat that carries StoppedAt). A store
	// that cannot represent a string of r (PostgreSQL refuses U+0000 and
	// invalid UTF-8) fails with an error wrapping ErrRejected.
	Heartbeat(ctx context.Context, r *Replica) error
	// Replicas returns at most limit replicas (a default of 100 when limit
	// is below 1), the most recently started first, then by ID.
	Replicas(ctx context.Context, limit int) ([]Replica, error)
	// PruneReplicas deletes the replicas whose last beat is before before,
	// whatever their state, and returns how many it deleted.
	PruneReplicas(ctx context.Context, before time.Time) (int, error)
	// RemoveReplicas deletes, for each mark, the replica with that ID
	// whose last beat is still exactly mark.BeatAt, and returns how many
	// it deleted. A replica that beat again since the caller read it is
	// kept: the caller judged a state it no longer has.
	RemoveReplicas(ctx context.Context, marks []ReplicaMark) (int, error)
}

// ReplicaMark names one replica record as it was read: its ID and the
// BeatAt of its last heartbeat then (see ReplicaRegistry.RemoveReplicas).
type ReplicaMark struct {
	ID     string
	BeatAt time.Time
}

package readmodel

import (
	"context"
	"time"
)

// ReplicaReplaced is the state of a replica that is gone (store.Replica.State
// says store.ReplicaGone) and that a live replica, started after its last
// beat, has replaced: it needs no one's attention.
const ReplicaReplaced = "replaced"

// ReplicaCounter is implemented by stores that keep replica heartbeats
// (store.ReplicaRegistry) and can count their records by state in one
// read, however many records there are. The console's overview, the
// replicas page, GET /api/replicas and the metric idem_replicas use it, so
// that a live replica is counted even behind any number of records that
// started after it.
type ReplicaCounter interface {
	// CountReplicas counts every replica record by its state at now, as
	// store.Replica.State judges it: stopped, else gone when its last beat
	// is more than store.ReplicaGoneBeats intervals before now (the
	// interval store.DefaultReplicaInterval when a record has none), else
	// alive. A gone replica whose last beat is before the start of an
	// alive one is counted as Replaced, not Gone. Safe for concurrent use.
	CountReplicas(ctx context.Context, now time.Time) (*ReplicaCounts, error)
}

// ReplicaCounts counts replica records by state (see ReplicaCounter).
type ReplicaCounts struct {
	Alive    int
	Stopped  int
	Gone     int
	Replaced int
}

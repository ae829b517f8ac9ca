package store

import (
	"context"
	"time"
)

// Definition is one saga definition that engines ran: a saga type and the
// fingerprint of its machine (states, events, transitions, timers,
// requests, attributes and schema version), as the engines that started
// with it recorded it.
type Definition struct {
	// SagaType is the saga type (idem.Machine.Name). Stores keep it
	// exactly, or refuse a definition whose type or fingerprint they
	// cannot keep (U+0000 on PostgreSQL, invalid UTF-8 on every SQL store)
	// with an error wrapping ErrRejected.
	SagaType string `json:"saga_type"`
	// Fingerprint identifies the definition within its saga type: equal
	// descriptions have equal fingerprints.
	Fingerprint string `json:"fingerprint"`
	// Description is the machine's canonical description (JSON). It is
	// opaque to the store, which keeps the bytes first recorded for the
	// fingerprint.
	Description []byte `json:"description"`
	// FirstSeen is when an engine first recorded the definition.
	FirstSeen time.Time `json:"first_seen"`
	// LastSeen is the latest time an engine recorded it: when the last
	// engine that runs it started.
	LastSeen time.Time `json:"last_seen"`
	// Replicas are the IDs of the replicas whose heartbeats say they run
	// this definition (Replica.Definitions), in ID order, whatever their
	// state: ReplicaRegistry.Replicas says which are alive. A replica's
	// entry goes with its record (PruneReplicas, RemoveReplicas). Only
	// Definitions fills it; RecordDefinitions ignores it.
	Replicas []string `json:"replicas,omitempty"`
}

// DefinitionStore is implemented by stores that keep the saga definitions
// engines ran (pgstore, sqlitestore and memstore do): the definition registry, which
// a deploy check compares a new build's machines with. A store that
// implements it also implements ReplicaRegistry, and keeps
// Replica.Definitions. The methods are safe for concurrent use, run
// outside any unit of work, and must pass storetest.
type DefinitionStore interface {
	// RecordDefinitions records defs at time at, each by its saga type
	// and fingerprint, all or none: a definition not yet recorded gets
	// FirstSeen and LastSeen at, and Description; one already recorded
	// keeps its FirstSeen and Description, and its LastSeen becomes at
	// unless it is already later. A definition whose saga type or
	// fingerprint the store cannot keep fails the call with an error
	// wrapping ErrRejected, and nothing is written.
	RecordDefinitions(ctx context.Context, at time.Time, defs []Definition) error
	// Definitions returns the recorded definitions of sagaType, the first
	// seen first (then by fingerprint), each with the replicas that run
	// it. A saga type with none, or one the store could not have recorded,
	// has none: nil, nil.
	Definitions(ctx context.Context, sagaType string) ([]Definition, error)
}

package store

import (
	"context"
	"time"
)

// InstanceQuerier is implemented by stores that can filter instances by
// status and key prefix, list the stuck ones (active, least recently
// updated first) and count instances by state, each in one query. It is
// optional: operations tools type-assert a Store for it and fall back to
// paging ListInstances. Implementations must pass storetest's
// RunInstanceQuerier.
type InstanceQuerier interface {
	// QueryInstances returns one page of the instances p selects, in
	// (SagaType, Key) order, or by (UpdatedAt, SagaType, Key) when p.Stuck
	// is set. An empty page means there are no more.
	QueryInstances(ctx context.Context, p *InstanceQuery) ([]*Instance, error)
	// CountInstances counts instances by saga type, state and status, in
	// (SagaType, State, Status) order; an empty sagaType counts every type.
	CountInstances(ctx context.Context, sagaType string) ([]StateCount, error)
}

// InstanceQuery selects instances for InstanceQuerier.QueryInstances. The
// zero value selects every instance, first page of the default size. Every
// non-empty filter must match.
type InstanceQuery struct {
	// SagaType, when set, is the only saga type listed.
	SagaType string
	// State, when set, is the only state listed.
	State string
	// Status, when set, is StatusActive or StatusFinished.
	Status string
	// KeyPrefix, when set, selects keys that start with it, byte for byte.
	KeyPrefix string
	// Attributes, when set, selects instances that have every one of these
	// attributes (name to value) with exactly that value. Values are
	// compared in Unicode NFC form: the store canonicalises them, so the
	// NFC and NFD spellings of a value select the same instances. A value
	// no attribute can hold (invalid UTF-8, a control character, empty)
	// selects nothing.
	Attributes map[string]string
	// Stuck selects active instances only and orders them by UpdatedAt,
	// oldest first, then by (SagaType, Key).
	Stuck bool
	// After is the keyset cursor: the last instance of the previous page
	// (its SagaType and Key, and with Stuck its UpdatedAt). Nil for the
	// first page.
	After *InstanceCursor
	// Limit bounds the page; 0 means 100.
	Limit int
}

// InstanceCursor is the position of an instance in a query's order.
type InstanceCursor struct {
	SagaType  string
	Key       string
	UpdatedAt time.Time
}

// CursorOf returns the cursor that continues a query after in.
func CursorOf(in *Instance) *InstanceCursor {
	return &InstanceCursor{SagaType: in.SagaType, Key: in.Key, UpdatedAt: in.UpdatedAt}
}

// StateCount is how many instances of a saga type are in one state.
type StateCount struct {
	SagaType string `json:"saga_type"`
	State    string `json:"state"`
	// Status is StatusActive or StatusFinished.
	Status string `json:"status"`
	Count  int    `json:"count"`
}

package readmodel

import (
	"context"
	"errors"
	"time"

	"github.com/idemhq/idem/store"
)

// InstanceQuerier is implemented by stores that can filter instances by
// status and key prefix, list the stuck ones (active, least recently
// updated first) and count instances by state, each in one query. It is
// optional: operations tools type-assert a store.Store for it and fall back to
// paging ListInstances. Implementations must pass storetest.Run, which
// runs its cases when a store implements it.
type InstanceQuerier interface {
	// QueryInstances returns one page of the instances p selects, in
	// (SagaType, Key) order, or by (UpdatedAt, SagaType, Key) when p.Stuck
	// is set. An empty page means there are no more.
	QueryInstances(ctx context.Context, p *InstanceQuery) ([]*store.Instance, error)
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
	// UpdatedFrom and UpdatedBefore, when set, select instances updated at
	// or after UpdatedFrom and before UpdatedBefore.
	UpdatedFrom, UpdatedBefore time.Time
	// After is the keyset cursor: the last instance of the previous page
	// (its SagaType and Key, and with Stuck its UpdatedAt). Nil for the
	// first page.
	After *InstanceCursor
	// Before is the backward keyset cursor: the first instance of the
	// page after the one wanted. The page is then the Limit instances
	// just before it, still in the query's order (an empty page: none is
	// before it). After and Before must not both be set.
	Before *InstanceCursor
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
func CursorOf(in *store.Instance) *InstanceCursor {
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

// CountBound is the bound the console counts up to: an exact count up
// to it, "more than CountBound" (with an estimate when the store has one)
// above it.
const CountBound = 10_000

// QueryCounter is implemented by stores that count what an InstanceQuery
// or a TimerQuery selects, reading at most bound+1 matching rows, so that
// a count costs no more than a page of bound rows however many match. It
// is optional; implementations must pass storetest.Run.
// Cursors and limits of the query are ignored.
type QueryCounter interface {
	// CountInstanceQuery counts the instances p selects, up to bound.
	CountInstanceQuery(ctx context.Context, p *InstanceQuery, bound int) (Count, error)
	// CountTimerQuery counts the timers p selects, up to bound.
	CountTimerQuery(ctx context.Context, p *TimerQuery, bound int) (Count, error)
}

// Count is a bounded count.
type Count struct {
	// N is how many match when Exact. Otherwise more than N match: N is
	// the bound.
	N int `json:"n"`
	// Exact is false when more than the bound match.
	Exact bool `json:"exact"`
	// Estimate, when not Exact, is the store's estimate of how many match
	// (from its planner's statistics); 0 when the store has none.
	Estimate int `json:"estimate,omitempty"`
}

// BoundedCount is the Count of n rows read with a bound: exact when n is
// at most bound, else "more than bound".
func BoundedCount(n, bound int) Count {
	if n > bound {
		return Count{N: bound}
	}
	return Count{N: n, Exact: true}
}

// TimerQuerier is implemented by stores that filter timers by saga type
// and due time and page through them in both directions. It is optional:
// operations tools type-assert a store.Store for it and fall back to paging
// ListTimers. Implementations must pass storetest.Run.
type TimerQuerier interface {
	// QueryTimers returns one page of the timers p selects in (DueAt,
	// SagaType, Key, Name) order. An empty page means there are no more.
	QueryTimers(ctx context.Context, p *TimerQuery) ([]store.Timer, error)
}

// TimerQuery selects timers for TimerQuerier.QueryTimers. The zero value
// selects every timer, first page of the default size. Every non-empty
// filter must match.
type TimerQuery struct {
	// SagaType, when set, is the only saga type listed.
	SagaType string
	// DueFrom and DueBefore, when set, select timers due at or after
	// DueFrom and before DueBefore.
	DueFrom, DueBefore time.Time
	// After is the keyset cursor: the last timer of the previous page. Nil
	// for the first page.
	After *TimerCursor
	// Before is the backward keyset cursor: the first timer of the page
	// after the one wanted. The page is then the Limit timers just before
	// it, still in due order. After and Before must not both be set.
	Before *TimerCursor
	// Limit bounds the page; 0 means 100.
	Limit int
}

// TimerCursor is the position of a timer in due order.
type TimerCursor struct {
	DueAt    time.Time
	SagaType string
	Key      string
	Name     string
}

// TimerCursorOf returns the cursor of t.
func TimerCursorOf(t *store.Timer) *TimerCursor {
	return &TimerCursor{DueAt: t.DueAt, SagaType: t.SagaType, Key: t.Key, Name: t.Name}
}

// ErrBothCursors is wrapped by the error of a query with both After and
// Before set.
var ErrBothCursors = errors.New("a query has either an After or a Before cursor, not both")

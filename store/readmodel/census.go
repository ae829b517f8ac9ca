package readmodel

import "context"

// Censuser is implemented by stores that count what a deploy must be able
// to serve: the live sagas by state and schema version, their pending
// timers, the message types waiting in the store's queue and outbox, and
// the attributes in use. Package deploy compares it with a new build's
// machines. It must pass storetest.
type Censuser interface {
	// Census counts what the store holds, each part with one grouped
	// query (the cost grows with the rows, never with a page size), read
	// from one snapshot where the store can. Each slice is in byte order
	// of its grouping columns.
	Census(ctx context.Context) (*Census, error)
}

// Census is what a store holds that a deploy must serve.
type Census struct {
	// States counts the live sagas (not finished) by type, state and the
	// schema version of their stored state.
	States []LiveStateCount `json:"states"`
	// Timers counts the pending timers by saga type, the state of their
	// saga ("" when the saga is gone or finished), timer name and the type
	// of the message each fires.
	Timers []TimerCount `json:"timers"`
	// Messages counts the messages still to be handled, by type: those in
	// the store's queue (a store that is no queue has none) and those in
	// the outbox, not yet sent.
	Messages []MessageCount `json:"messages"`
	// Attributes counts the stored attribute values by saga type and
	// name: what the console's filters find.
	Attributes []AttributeCount `json:"attributes"`
}

// LiveStateCount is one row of Census.States: live sagas of one type in one
// state at one schema version.
type LiveStateCount struct {
	SagaType      string `json:"saga_type"`
	State         string `json:"state"`
	SchemaVersion int    `json:"schema_version"`
	Count         int64  `json:"count"`
}

// TimerCount is one row of Census.Timers.
type TimerCount struct {
	SagaType  string `json:"saga_type"`
	State     string `json:"state"`
	Name      string `json:"name"`
	EventType string `json:"event_type"`
	Count     int64  `json:"count"`
}

// MessageCount is one row of Census.Messages. Where is "queue" or
// "outbox".
type MessageCount struct {
	Type  string `json:"type"`
	Where string `json:"where"`
	Count int64  `json:"count"`
}

// AttributeCount is one row of Census.Attributes.
type AttributeCount struct {
	SagaType string `json:"saga_type"`
	Name     string `json:"name"`
	Count    int64  `json:"count"`
}

// Where a MessageCount's messages wait.
const (
	InQueue  = "queue"
	InOutbox = "outbox"
)

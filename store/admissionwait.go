package store

import (
	"context"
	"time"
)

// MaxAdmissionWaitsOf bounds what AdmissionWaiter.AdmissionWaitsOf
// returns for one saga key.
const MaxAdmissionWaitsOf = 20

// AdmissionWait is a queue message of a saga waiting for admission: an
// admitting receive looked at it and refused it (or a message before it
// of its partition key), and it is still visible and not leased since.
type AdmissionWait struct {
	// MessageID is the message's ID and MessageType its type.
	MessageID   string `json:"message_id"`
	MessageType string `json:"message_type"`
	// Limit is the counter it waits for.
	Limit LimitKey `json:"limit"`
	// VisibleAt is when it became visible (since when it waits, at the
	// most).
	VisibleAt time.Time `json:"visible_at"`
}

// AdmissionWaiter is an AdmittingQueue that reads back the refusals its
// admitting receive records (the read model of the console's "why"
// panel). It is an optional capability, found by type assertion; an
// implementation must pass storetest's Flow cases. Safe for concurrent
// use.
type AdmissionWaiter interface {
	// AdmissionWaitsOf returns the messages whose partition key
	// (transport.PartitionKey: the canonical CorrelationID) is key and
	// whose current refusal is recorded, in the queue's order, at most
	// MaxAdmissionWaitsOf. A refusal is current while the message is
	// visible and not leased since it was recorded. None is not an
	// error.
	AdmissionWaitsOf(ctx context.Context, key string) ([]AdmissionWait, error)
}

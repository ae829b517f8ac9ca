package transport

import (
	"context"
	"time"
)

// LeaseExtender is implemented by transports whose deliveries are leased
// (handed out again when not settled within a visibility timeout) and
// that can keep a lease alive while its delivery is still being worked
// on. The engine renews the leases of a batch that is still running every
// third of LeaseDuration, so that a handler slower than the lease does
// not have its whole batch handed to another consumer, refused at commit
// and run again (a livelock). A transport whose deliveries are not
// leased, or whose leases cannot be extended, does not implement it; the
// engine then bounds the damage instead (a message that outlived its
// lease runs apart from its batch mates, and is dead-lettered after
// Config.MaxAttempts hand-outs). transporttest checks it (ExtendLease) on
// every transport that implements it.
type LeaseExtender interface {
	// LeaseDuration is how long a delivery's lease lasts from Receive, or
	// from its last extension; the engine renews every third of it.
	LeaseDuration() time.Duration
	// ExtendLeases renews the lease of each delivery of ds for
	// LeaseDuration from now, by the clock that measures the lease (the
	// database's or the broker's), fenced by the delivery's Token: a
	// delivery whose lease expired and that was handed out again is left
	// untouched, and its error wraps ErrLeaseLost. A delivery settled
	// already is ignored, without an error: acked, or nacked, for a Nack
	// settles a delivery too, and an extension after it must keep the
	// Nack's delay (transporttest's ExtendAfterNackKeepsDelay). As with Ack, the others are extended whatever
	// happens to one, and the errors are joined. It must be safe for
	// concurrent use with Receive, Ack and Nack, and returns ErrClosed
	// after Close.
	ExtendLeases(ctx context.Context, ds []Delivery) error
}

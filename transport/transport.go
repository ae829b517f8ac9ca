// Package transport defines the at-least-once message transport contract
// that Idem's engine consumes from and publishes to.
//
// The contract is deliberately small so that third parties can implement it
// for their broker: a Transport publishes envelopes, hands out deliveries in
// batches, and settles each delivery with Ack or Nack. Every implementation
// must pass the conformance suite in package transporttest.
//
// A transport that partitions (PartitionedConsumer) routes each envelope
// to PartitionOf(PartitionKey(env), parts), the rule pgstore's queue and
// every bundled transport follow; this package exports it so that a
// transport written elsewhere honours it without copying code.
//
// This package imports only the standard library and package canon (for
// the canonical form of a correlation ID, which needs
// golang.org/x/text/unicode/norm).
package transport

import (
	"context"
	"errors"
	"time"
)

// Header names Idem sets on envelopes. Transports carry headers opaquely.
const (
	// HeaderTraceParent carries the W3C trace context of the causing message.
	HeaderTraceParent = "traceparent"
	// HeaderTimer names the saga timer that produced the envelope.
	HeaderTimer = "idem-timer"
	// HeaderIntent is "send" for commands and "publish" for events.
	HeaderIntent = "idem-intent"
	// HeaderSagaType and HeaderSagaKey name the saga that emitted the envelope.
	HeaderSagaType = "idem-saga-type"
	// HeaderSagaKey is the canonical key of the emitting saga.
	HeaderSagaKey = "idem-saga-key"
	// HeaderFault, on a message a saga emitted, is the message type of the
	// fault event to send back to that saga (HeaderSagaType, HeaderSagaKey)
	// when the message is dead-lettered. Set when the saga declared that it
	// handles faults of the message's type (saga.NewFault, saga.NewRequest).
	HeaderFault = "idem-fault"
	// HeaderActor names the operator who sent the message from the admin
	// console or API ("console session 1a2b3c4d", "api: alice"); the
	// engine records it as the journal entry's Actor. Any producer can set
	// it: it says who the message claims sent it, not who proved it. The
	// engine's Publish takes such a message for a deliberate re-publish
	// and gives it a new HeaderRepublish mark.
	HeaderActor = "idem-actor"
)

// ErrClosed is returned by a Transport that has been closed.
var ErrClosed = errors.New("transport closed")

// ErrLeaseLost is returned by Ack or Nack when the delivery's lease expired
// and the message was handed to another consumer: the late settlement must
// not affect the newer delivery (fencing).
var ErrLeaseLost = errors.New("delivery lease lost")

// ErrTooLarge is wrapped by Publish's error for a message the transport
// can never carry (over its size limit). Publishing it again will fail
// again: the engine's outbox relay sets such a message aside as a dead
// letter instead of retrying it with the others.
var ErrTooLarge = errors.New("message too large for the transport")

// Envelope is one message as it travels through a transport and is stored in
// outboxes and dead-letter stores. The zero value is not valid: ID and Type
// are required.
type Envelope struct {
	// ID identifies the message and stays the same across redeliveries and
	// re-sends. Required.
	ID string `json:"id"`
	// Type names the message type; the engine maps it to a Go type.
	// Required.
	Type string `json:"type"`
	// CorrelationID is the key of the saga the message is about, when the
	// producer knows it. Transports may partition by it.
	CorrelationID string `json:"correlation_id,omitempty"`
	// CausationID is the ID of the message whose processing produced this one.
	CausationID string `json:"causation_id,omitempty"`
	// IdempotencyKey, when set, is the deduplication identity instead of ID
	// (for example a SHA-256 of an uploaded file supplied by the producer).
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// Headers are free-form metadata, including W3C traceparent.
	Headers map[string]string `json:"headers,omitempty"`
	// SentAt is when the producer created the message.
	SentAt time.Time `json:"sent_at"`
	// Body is the encoded message (JSON by default).
	Body []byte `json:"body"`
}

// DedupID returns the identity used for deduplication: the idempotency key
// when one is set, the ID otherwise.
func (e *Envelope) DedupID() string {
	if e.IdempotencyKey != "" {
		return e.IdempotencyKey
	}
	return e.ID
}

// Clone returns a deep copy of e.
func (e Envelope) Clone() Envelope {
	if e.Headers != nil {
		h := make(map[string]string, len(e.Headers))
		for k, v := range e.Headers {
			h[k] = v
		}
		e.Headers = h
	}
	if e.Body != nil {
		e.Body = append([]byte(nil), e.Body...)
	}
	return e
}

// Delivery is one handing-out of an envelope to a consumer. A delivery must
// be settled exactly once with Ack or Nack; an unsettled delivery is handed
// out again after the transport's visibility timeout.
type Delivery struct {
	// Envelope is the delivered message.
	Envelope Envelope
	// Attempt counts deliveries of this message, starting at 1.
	Attempt int
	// Token identifies this particular delivery (a lease or fencing token).
	// It is opaque to the engine.
	Token string
	// Admitted reports a delivery of a flow-controlled receive
	// (store.AdmittingQueue.ReceiveAdmitted), and Waited how long its
	// message was visible, waiting for admission, before it was admitted
	// (0 or more). Other receives leave both zero.
	Admitted bool
	Waited   time.Duration
}

// Publisher sends envelopes. Publish returns once the transport has durably
// accepted every envelope, or an error; on error some envelopes may have been
// accepted, and the caller may publish them again with the same IDs.
// Implementations must be safe for concurrent use.
type Publisher interface {
	Publish(ctx context.Context, msgs []Envelope) error
}

// Consumer hands out deliveries at least once.
//
// Receive blocks until at least one delivery is available, ctx is done, or
// the transport is closed, and returns at most max deliveries (max < 1
// means 1). Transports should hand out envelopes in publication order; order
// is best effort and the engine's guarantees do not depend on it.
//
// Ack settles deliveries as done. Nack returns one delivery for redelivery
// no sooner than delay from now (a transport without native delays may
// redeliver earlier; transporttest's Features say which). Both return
// ErrLeaseLost (wrapped) for a delivery whose lease expired and that was
// handed out again, and must then leave the newer delivery untouched.
// Settling an already settled delivery is not an error; a settlement after
// the lease expired but before the message was handed out again may be
// accepted. When Ack fails for some deliveries of a batch it settles the
// others and returns the joined errors. Implementations must be safe for
// concurrent use.
//
// Attempt counts every hand-out of one published copy, so lost acks and
// expired leases raise it too; the engine's retry limit is therefore an
// upper bound on handler runs, not an exact count.
type Consumer interface {
	Receive(ctx context.Context, max int) ([]Delivery, error)
	Ack(ctx context.Context, ds []Delivery) error
	Nack(ctx context.Context, d Delivery, delay time.Duration) error
}

// PartitionedConsumer is implemented by transports that can hand out only
// the messages of one partition: those whose partition key hashes to part
// modulo parts, PartitionOf(PartitionKey(env), parts). The partition key
// is the canonical form of the CorrelationID (Unicode NFC, surrounding
// white space trimmed), or the ID without one, so that the NFC and NFD
// forms of one saga key share a partition and so an order; the hash is
// PostgreSQL's hashtext (PartitionHash), which pgstore computes in SQL.
// An engine with several consumers gives each its own partitions, so that
// concurrent batches do not contend for the same saga keys. The same
// contract as Receive applies otherwise; ReceivePartition returns an error
// unless 0 <= part < parts. transporttest checks it with
// Features.Partitioned.
type PartitionedConsumer interface {
	ReceivePartition(ctx context.Context, max, part, parts int) ([]Delivery, error)
}

// Share is one replica's share of a queue that several replicas consume:
// the messages whose ShareOf(PartitionKey(env), Parts) is Part, and, when
// those have nothing visible, the others' that have been visible for at
// least StealAfter (their replica is gone, or behind). Parts < 2 is the
// whole queue.
type Share struct {
	Part, Parts int
	StealAfter  time.Duration
}

// SharedConsumer is implemented by queues that replicas can share by
// partitions of the saga keys without ever leaving a partition unread:
// ReceiveShare hands out the messages of the share's own range of the
// saga keys first (ShareOf), and only when it has none visible, those of
// other shares visible for StealAfter or longer. It calls share
// before each attempt to claim, so a receive that waits follows a change
// of the share. Replicas that each take their own share keep one saga
// key's messages in one replica while every replica is up, so their
// units of work do not race for the same sagas; the share is a
// preference, never a lock, and two replicas that briefly disagree about
// the shares only race as replicas without shares do. The same contract
// as Receive applies otherwise; ReceiveShare returns an error unless
// 0 <= Part < Parts or Parts < 2.
type SharedConsumer interface {
	ReceiveShare(ctx context.Context, max int, share func() Share) ([]Delivery, error)
}

// SizeLimiter is implemented by transports that carry envelope bodies only
// up to a size. The engine keeps Config.MaxBodyBytes within the limit, so
// that no saga can emit a message the transport would refuse. transporttest
// checks it with Features.SizeLimit.
type SizeLimiter interface {
	// MaxMessageBytes is the largest Envelope.Body Publish accepts; 0 or
	// less means no limit. Publish refuses a longer Body, before handing
	// out any of it, with an error wrapping ErrTooLarge.
	MaxMessageBytes() int
}

// PendingCounter is implemented by transports that can count the messages
// they hold: ready ones waiting to be handed out, and unacked ones handed
// out but not yet settled. Operators read it as the queue depth. Each
// implementation documents what it can see (a broker client may not see
// other connections' deliveries). Pending returns ErrClosed after Close.
// transporttest checks it with Features.Pending.
type PendingCounter interface {
	Pending(ctx context.Context) (ready, unacked int, err error)
}

// Transport is a Publisher and a Consumer. Close releases resources; after
// Close, every method returns ErrClosed.
type Transport interface {
	Publisher
	Consumer
	Close() error
}

// Package idem is a message-driven saga engine with exactly-once effects on
// top of at-least-once delivery.
//
// A saga is a typed state machine (package saga). The Engine takes batches
// of deliveries from a transport, skips duplicates with an inbox keyed by
// message ID, applies each message's transition, and commits the new state,
// the inbox record, the emitted messages (outbox) and the timers in one unit
// of work of the store; after the commit it acknowledges the deliveries and
// hands the emitted messages to the transport with IDs derived from the
// incoming message, so a re-send is recognisable as the same message.
//
// Stores implement package store and pass storetest; transports implement
// package transport and pass transporttest. A store that is also a queue
// (store.Queue) settles deliveries inside the same unit of work.
package idem

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/transport"
)

// Envelope is a message with its identity and metadata; see
// transport.Envelope.
type Envelope = transport.Envelope

// Machine is what the engine needs of a saga definition. *saga.Machine[S]
// implements it.
type Machine interface {
	// Name is the saga type, the namespace of its instances in the store.
	Name() string
	// MessageTypes lists the message types the machine consumes.
	MessageTypes() []string
	// Decode decodes a body of a consumed type and returns its raw key.
	Decode(msgType string, body []byte) (msg any, key string, err error)
	// Correlate returns the key of a consumed message value.
	Correlate(msg any) (string, bool)
	// Apply runs one message against one saga, purely.
	Apply(in saga.Input) (saga.Result, error)
	// NotFound is the policy for events that find no saga.
	NotFound() saga.NotFoundPolicy
	// Validate reports unhandled pairs, unreachable states, unconsumed events.
	Validate() error
	// Mermaid and DOT draw the machine.
	Mermaid() string
	DOT() string
	// Describe returns the machine's complete, canonical description:
	// what the console draws, `idem graph --format json` prints, and the
	// definition fingerprint (saga.Description.Fingerprint) hashes. A
	// Machine that wraps another returns the wrapped one's description.
	Describe() saga.Description
}

var _ Machine = (*saga.Machine[struct{}])(nil)

// ErrInvalidEnvelope is wrapped by NewEnvelope and Engine.Publish for an
// envelope without an ID or a type.
var ErrInvalidEnvelope = errors.New("invalid envelope")

// NewEnvelope encodes msg as JSON in an envelope with the given ID and the
// message's type name (saga.MessageType). The ID must stay the same when
// the producer retries, so that duplicates are recognised: derive it from
// the producer's own identity for the event (an S3 request ID, a hash of the
// uploaded file), never from the clock or a random source.
func NewEnvelope(id string, msg any) (Envelope, error) {
	if id == "" {
		return Envelope{}, fmt.Errorf("new envelope for %T: %w: empty ID", msg, ErrInvalidEnvelope)
	}
	body, err := json.Marshal(msg)
	if err != nil {
		return Envelope{}, fmt.Errorf("new envelope %s: encode %T: %w", id, msg, err)
	}
	return Envelope{ID: id, Type: saga.MessageType(msg), Body: body}, nil
}

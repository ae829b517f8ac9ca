package idem

import (
	"errors"
	"fmt"
	"time"

	"github.com/idemhq/idem/transport"
)

// Dead-letter reasons recorded by the engine. They are stable strings that
// operators filter on.
const (
	ReasonMissingID        = "missing_id"
	ReasonInvalidID        = "invalid_id"
	ReasonUnknownType      = "unknown_type"
	ReasonOversized        = "oversized_body"
	ReasonMalformed        = "malformed_body"
	ReasonInvalidKey       = "invalid_key"
	ReasonUnhandled        = "unhandled_event"
	ReasonNotFound         = "saga_not_found"
	ReasonSchema           = "state_schema"
	ReasonPermanent        = "permanent_error"
	ReasonRetriesExhausted = "retries_exhausted"
	// ReasonUndeliverable marks an emitted message the transport refused
	// as too large (transport.ErrTooLarge) when the outbox relay sent it.
	ReasonUndeliverable = "undeliverable"
	// ReasonInvalidIdempotencyKey, ReasonInvalidType,
	// ReasonInvalidCorrelationID, ReasonInvalidCausationID and
	// ReasonInvalidHeader mark an envelope whose field breaks
	// transport.ValidateEnvelope's rules (U+0000, invalid UTF-8, control
	// characters, sizes); ReasonInvalidID covers the ID itself.
	ReasonInvalidIdempotencyKey = "invalid_idempotency_key"
	ReasonInvalidType           = "invalid_type"
	ReasonInvalidCorrelationID  = "invalid_correlation_id"
	ReasonInvalidCausationID    = "invalid_causation_id"
	ReasonInvalidHeader         = "invalid_header"
	// ReasonInvalidState marks a message whose transition produced a saga
	// state the store refused (store.ErrRejected): PostgreSQL cannot keep
	// U+0000 in a jsonb string, for one. The error names the field.
	ReasonInvalidState = "invalid_state"
	// ReasonUnstorable marks a message whose unit of work the store
	// refused (store.ErrRejected) for a field other than the state.
	ReasonUnstorable = "unstorable"
	// ReasonInvalidAttribute marks a message whose transition produced an
	// attribute value that cannot be stored (saga.ErrAttribute): invalid
	// UTF-8, a control character (U+0000 included), or over 256 bytes. The
	// error names the attribute.
	ReasonInvalidAttribute = "invalid_attribute"
	// ReasonUnknownState marks a message for a saga whose stored state,
	// or state schema version, this build does not know
	// (saga.ErrUnknownState), after Config.MaxAttempts deliveries found
	// no replica that knows it: the saga was written by another
	// definition (a newer build that was rolled back, or an older state
	// this build removed). Run idem deploy check (docs/deploys.md).
	ReasonUnknownState = "unknown_state"
)

// invalidReason is the dead-letter reason for a transport.FieldError field.
func invalidReason(field string) string {
	switch field {
	case transport.FieldID:
		return ReasonInvalidID
	case transport.FieldIdempotencyKey:
		return ReasonInvalidIdempotencyKey
	case transport.FieldType:
		return ReasonInvalidType
	case transport.FieldCorrelationID:
		return ReasonInvalidCorrelationID
	case transport.FieldCausationID:
		return ReasonInvalidCausationID
	}
	return ReasonInvalidHeader
}

// MaxIDBytes is the longest message ID (or idempotency key) the engine
// accepts; a longer one is dead-lettered with ReasonInvalidID. The ID is
// copied onto every message a saga emits in reply (as its causation ID),
// so it must stay small enough for any transport's message limit.
const MaxIDBytes = 512

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as permanent: the engine dead-letters the message at
// once instead of retrying it. Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

// IsPermanent reports whether err's chain holds an error marked Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

type retryAfterError struct {
	d   time.Duration
	err error
}

func (e *retryAfterError) Error() string { return fmt.Sprintf("retry after %s: %v", e.d, e.err) }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks err as transient and asks for the next attempt no sooner
// than d from now. The attempt still counts towards Config.MaxAttempts.
// RetryAfter(d, nil) returns nil.
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{d: d, err: err}
}

// retryDelay returns the delay requested by RetryAfter in err's chain.
func retryDelay(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.d, true
	}
	return 0, false
}

package idem

import (
	"errors"
	"fmt"
	"time"
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
)

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

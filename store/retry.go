package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/transport"
)

// Retry is the retry state of one message the engine gave back to its
// transport after a failure, to be delivered again later: what an
// operator reads to learn why a saga is not moving. It is recorded only on
// failure (a message that succeeds at its first delivery writes none), in
// the commit that gives the message back (Changes.RecordRetries), and
// cleared in the commit that applies the message or dead-letters it
// (Changes.ClearRetries). A retry whose message never comes back (the
// transport dropped it) is deleted by the engine's sweeper once its
// NextAttemptAt is older than the retention (RetrySweeper). It lives in
// the store, so it is the same whatever the transport.
type Retry struct {
	// ID is the message's deduplication identity, as a dead letter's ID:
	// one Retry per message.
	ID string `json:"id"`
	// SagaType and Key are the saga the message is for (a plain handler's
	// messages have the engine's handler type).
	SagaType string `json:"saga_type"`
	Key      string `json:"key"`
	// MessageID and MessageType are the envelope's.
	MessageID   string `json:"message_id"`
	MessageType string `json:"message_type"`
	// Attempts counts the failed deliveries: the failed delivery's
	// transport.Delivery.Attempt.
	Attempts int `json:"attempts"`
	// Error is the last failure's error chain as text, as RetryText makes
	// it: valid UTF-8 without U+0000, at most MaxRetryErrorBytes bytes.
	Error string `json:"error"`
	// FirstFailedAt is the first recorded failure's time, kept when the
	// retry is recorded again; LastFailedAt the latest's.
	FirstFailedAt time.Time `json:"first_failed_at"`
	LastFailedAt  time.Time `json:"last_failed_at"`
	// NextAttemptAt is when the transport should deliver the message
	// again: the failure's time plus the delay it was given back with.
	NextAttemptAt time.Time `json:"next_attempt_at"`
	// Envelope is the failed message as it arrived, kept so that an
	// operator can publish it again now; nil for a retry
	// recorded without one (before the stores kept it). It is not part
	// of the JSON: its body is the message's, not the retry's.
	Envelope *transport.Envelope `json:"-"`
	// RetryNowAt is when an operator last published the message again
	// (zero if never): from then on a failure is recorded even with fewer
	// Attempts (see RetryRecorder.RecordRetry).
	RetryNowAt time.Time `json:"retry_now_at,omitzero"`
}

// MaxRetryErrorBytes bounds Retry.Error: an error chain that quotes a
// whole payload does not make each retry write kilobytes.
const MaxRetryErrorBytes = 4096

// RetryText is s as Retry.Error holds it: U+0000 becomes the four
// characters \x00, invalid UTF-8 becomes U+FFFD (as dead letters' Error),
// and the result is cut at a rune boundary to MaxRetryErrorBytes bytes,
// ending in "…" when it was cut.
func RetryText(s string) string {
	if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
		s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", `\x00`)
	}
	if len(s) <= MaxRetryErrorBytes {
		return s
	}
	const ellipsis = "…"
	n := MaxRetryErrorBytes - len(ellipsis)
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + ellipsis
}

// Validate reports a retry no store can record: an empty ID, an identity
// field (ID, SagaType, Key, MessageID, MessageType) that is not valid
// UTF-8 or holds U+0000, Attempts below 1, or a zero time. The error
// wraps ErrRejected and names the field. Error is not checked: stores
// record RetryText(Error).
func (r *Retry) Validate() error {
	if r.ID == "" {
		return &RejectedError{Field: "retry id", Err: errors.New("empty")}
	}
	for _, f := range []struct{ name, v string }{
		{"retry id", r.ID}, {"saga type", r.SagaType}, {"saga key", r.Key},
		{"message id", r.MessageID}, {"message type", r.MessageType},
	} {
		if !utf8.ValidString(f.v) || strings.ContainsRune(f.v, 0) {
			return &RejectedError{Field: f.name, Err: fmt.Errorf("%.60q is not valid UTF-8 without U+0000", f.v)}
		}
	}
	switch {
	case r.Attempts < 1:
		return &RejectedError{Field: "attempts", Err: fmt.Errorf("%d is below 1", r.Attempts)}
	case r.FirstFailedAt.IsZero() || r.LastFailedAt.IsZero() || r.NextAttemptAt.IsZero():
		return &RejectedError{Field: "retry times", Err: errors.New("first failed, last failed and next attempt must be set")}
	}
	return nil
}

// Storable reports whether s can be a retry's identity field (see
// Validate): a read for one that cannot selects nothing.
func Storable(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// MaxRetriesOf bounds what Retries returns for one saga.
const MaxRetriesOf = 100

// DefaultRetryPage and MaxRetryPage bound a page of QueryRetries: a
// Limit of 0 means DefaultRetryPage, one above MaxRetryPage means
// MaxRetryPage.
const (
	DefaultRetryPage = 100
	MaxRetryPage     = 1000
)

// RetryQuery selects a page of retries for RetryRecorder.QueryRetries.
// The zero value selects the first page of every retry.
type RetryQuery struct {
	// SagaType, when set, selects the retries of that saga type only.
	SagaType string
	// AfterFirstFailedAt and AfterID are the cursor: the FirstFailedAt and
	// ID of the last retry of the previous page (both zero for the first
	// page).
	AfterFirstFailedAt time.Time
	AfterID            string
	// Limit bounds the page (see DefaultRetryPage and MaxRetryPage).
	Limit int
}

// PageLimit is q.Limit as a store applies it.
func (q *RetryQuery) PageLimit() int {
	switch {
	case q.Limit <= 0:
		return DefaultRetryPage
	case q.Limit > MaxRetryPage:
		return MaxRetryPage
	}
	return q.Limit
}

// RetryRecorder is implemented by stores that keep the retry state of
// messages (every bundled store). It is optional: the engine resolves it
// once, and without it records nothing and ignores Changes.ClearRetries
// and Changes.RecordRetries.
// Implementations must pass storetest's Retries cases.
type RetryRecorder interface {
	// RecordRetry stores r, replacing the retry with the same ID but
	// keeping its FirstFailedAt; it stores RetryText(r.Error) and times at
	// microsecond precision. A retry recorded with fewer Attempts than the
	// stored one changes nothing (a late write of an earlier failure never
	// overwrites a later one); equal Attempts replace it. Once the stored
	// retry has a RetryNowAt, a retry whose LastFailedAt is not before it
	// replaces it whatever its Attempts (the copy an operator published
	// counts its attempts afresh), keeping the greater Attempts. A zero
	// RetryNowAt keeps the stored one. A retry Validate
	// refuses is refused with its error (wrapping ErrRejected) and nothing
	// is written. It commits on its own, outside any unit of work: the
	// engine records retries in its commits (Changes.RecordRetries), and
	// this is for writers without a unit of work.
	RecordRetry(ctx context.Context, r *Retry) error
	// Retries returns the retries of the saga k, at most MaxRetriesOf,
	// ordered by (FirstFailedAt, ID). A key no retry can have (with
	// U+0000, say) selects none, without an error.
	Retries(ctx context.Context, k Key) ([]Retry, error)
	// QueryRetries returns one page of the retries q selects, ordered by
	// (FirstFailedAt, ID) (IDs in byte order), after q's cursor. An empty
	// or short page is the last one.
	QueryRetries(ctx context.Context, q *RetryQuery) ([]Retry, error)
}

// RetrySweeper is implemented by retry recorders that delete retries
// whose message never came back: a message its transport dropped (by a
// TTL, a trimmed stream, a purged queue) leaves a retry nothing clears.
// The engine's sweeper deletes, in batches, the retries whose
// NextAttemptAt is older than Config.Retention. Implementations must pass
// storetest's Retries cases.
type RetrySweeper interface {
	// SweepRetries deletes at most p.Limit retries whose NextAttemptAt is
	// before p.NextAttemptBefore, oldest first, and returns how many it
	// deleted. A p Validate refuses is refused with its error.
	SweepRetries(ctx context.Context, p *StaleRetries) (int, error)
}

// StaleRetries selects retries by their next attempt for RetrySweeper.
type StaleRetries struct {
	// NextAttemptBefore selects the retries whose NextAttemptAt is before
	// it; the zero time selects none.
	NextAttemptBefore time.Time
	// Limit bounds the retries deleted; it must be positive.
	Limit int
}

// Validate returns an error naming what is wrong with p: a nil p or a
// Limit below 1.
func (p *StaleRetries) Validate() error {
	switch {
	case p == nil:
		return errors.New("stale retries: nil")
	case p.Limit < 1:
		return fmt.Errorf("stale retries: limit %d is below 1", p.Limit)
	}
	return nil
}

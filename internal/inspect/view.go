package inspect

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Envelope is a message as the admin API and idem's --json output show it
// (admin.Envelope). Body is the message's JSON when BodyEncoding is "json",
// a JSON string holding the body's text when it is "utf-8", and a JSON
// string holding the standard base64 of the body when it is "base64".
type Envelope struct {
	ID             string            `json:"id"`
	Type           string            `json:"type"`
	CorrelationID  string            `json:"correlation_id,omitempty"`
	CausationID    string            `json:"causation_id,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	SentAt         time.Time         `json:"sent_at,omitzero"`
	Body           json.RawMessage   `json:"body"`
	BodyEncoding   string            `json:"body_encoding"`
}

// DeadLetter is a dead letter as the admin API and idem dlq --json show it
// (admin.DeadLetter): the one JSON shape of a dead letter.
type DeadLetter struct {
	ID            string    `json:"id"`
	Envelope      Envelope  `json:"envelope"`
	Reason        string    `json:"reason"`
	Error         string    `json:"error"`
	SagaType      string    `json:"saga_type,omitempty"`
	Key           string    `json:"key,omitempty"`
	Attempts      int       `json:"attempts"`
	FirstFailedAt time.Time `json:"first_failed_at"`
	LastFailedAt  time.Time `json:"last_failed_at"`
	// FirstReason and FirstError are the first failure's; Replays is the
	// replay history, oldest first; History sums it up in one line (see
	// History).
	FirstReason string         `json:"first_reason,omitempty"`
	FirstError  string         `json:"first_error,omitempty"`
	Replays     []store.Replay `json:"replays,omitempty"`
	History     string         `json:"history,omitempty"`
	// State is unresolved, resolved (the latest replay succeeded or was a
	// duplicate) or pending (the latest replay is pending).
	State store.DeadLetterState `json:"state"`
	// Fingerprint groups dead letters that failed alike (see
	// store.Fingerprint; "" when recorded before fingerprints);
	// ArchivedAt is when the dead letter was archived (absent when it is
	// not).
	Fingerprint string    `json:"fingerprint,omitempty"`
	ArchivedAt  time.Time `json:"archived_at,omitzero"`
}

// EnvelopeOf returns e as the API shows it, times in UTC.
func EnvelopeOf(e *transport.Envelope) Envelope {
	out := Envelope{
		ID: e.ID, Type: e.Type, CorrelationID: e.CorrelationID, CausationID: e.CausationID,
		IdempotencyKey: e.IdempotencyKey, Headers: e.Headers, SentAt: e.SentAt.UTC(),
	}
	if e.SentAt.IsZero() {
		out.SentAt = time.Time{}
	}
	switch {
	case len(e.Body) > 0 && json.Valid(e.Body):
		out.Body, out.BodyEncoding = e.Body, "json"
	case utf8.Valid(e.Body):
		out.Body, _ = json.Marshal(string(e.Body)) // a string always marshals
		out.BodyEncoding = "utf-8"
	default:
		out.Body, _ = json.Marshal(base64.StdEncoding.EncodeToString(e.Body))
		out.BodyEncoding = "base64"
	}
	return out
}

// DeadLetterOf returns d as the API shows it, times in UTC.
func DeadLetterOf(d *store.DeadLetter) DeadLetter {
	return DeadLetter{
		ID: d.ID, Envelope: EnvelopeOf(&d.Envelope), Reason: d.Reason, Error: d.Error, SagaType: d.SagaType, Key: d.Key,
		Attempts: d.Attempts, FirstFailedAt: d.FirstFailedAt.UTC(), LastFailedAt: d.LastFailedAt.UTC(),
		FirstReason: d.FirstReason, FirstError: d.FirstError, Replays: d.Replays, History: History(d), State: d.State(),
		Fingerprint: d.Fingerprint, ArchivedAt: d.ArchivedAt.UTC(),
	}
}

// History sums up a dead letter's replays in one line, as the console, the
// API and the CLI show it: "" when it was never replayed, else "replayed N
// times" and what became of the latest replay, e.g. "replayed 2 times;
// failed again at 2026-01-02T15:04:05Z with unknown_type: …". A replay is
// pending until an engine consumes the message (succeeded) or dead-letters
// it again (failed).
func History(d *store.DeadLetter) string {
	r := d.LastReplay()
	if r == nil {
		return ""
	}
	n := "once"
	if len(d.Replays) > 1 {
		n = fmt.Sprintf("%d times", len(d.Replays))
	}
	at := func(t time.Time) string { return t.UTC().Format(time.RFC3339) }
	switch r.Outcome {
	case store.ReplayFailed:
		return fmt.Sprintf("replayed %s; failed again at %s with %s: %s", n, at(r.SettledAt), r.Reason, firstLine(r.Error))
	case store.ReplaySucceeded:
		return fmt.Sprintf("replayed %s; the last replay succeeded at %s: consumed without failing again", n, at(r.SettledAt))
	case store.ReplayDuplicate:
		return fmt.Sprintf("replayed %s; the last replay was a duplicate at %s: not applied: an earlier copy of this message was applied", n, at(r.SettledAt))
	case store.ReplayNotSent:
		return fmt.Sprintf("replayed %s; the last replay was not sent at %s: %s", n, at(r.SettledAt), firstLine(r.Error))
	}
	return fmt.Sprintf("replayed %s; the last replay, at %s, is pending: re-queued, not yet consumed", n, at(r.At))
}

// firstLine is the first line of an error chain, shortened to 200 runes.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > 200 {
		return string(r[:200]) + "…"
	}
	return s
}

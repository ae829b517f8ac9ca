package admin

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

const (
	defaultLimit = 100
	maxLimit     = 1000
	// maxFieldLen bounds the id, type and idempotency_key of a submitted
	// message, and its correlation_id unless the engine's MaxKeyLen is
	// larger. Saga keys are checked against the engine's MaxKeyLen.
	maxFieldLen = 1024
)

// Instance is one saga instance as the API returns it: Data is the saga's
// state document as JSON.
type Instance struct {
	SagaType      string            `json:"saga_type"`
	Key           string            `json:"key"`
	State         string            `json:"state"`
	Status        string            `json:"status"`
	Data          json.RawMessage   `json:"data"`
	SchemaVersion int               `json:"schema_version"`
	Version       int64             `json:"version"`
	Timers        map[string]string `json:"timers,omitempty"`
	CreatedAt     time.Time         `json:"created_at"`
	UpdatedAt     time.Time         `json:"updated_at"`
	FinishedAt    time.Time         `json:"finished_at,omitzero"`
	// Attributes are the saga's business attributes, name to value.
	Attributes map[string]string `json:"attributes,omitempty"`
}

// SagaList is the answer of GET /api/sagas. Next, when set, is the after
// parameter of the next page.
type SagaList struct {
	Sagas []Instance `json:"sagas"`
	Next  string     `json:"next,omitempty"`
}

// Saga is the answer of GET /api/sagas/{type}/{key}.
type Saga struct {
	Saga    Instance             `json:"saga"`
	Journal []store.JournalEntry `json:"journal"`
}

// Envelope is a message as the API returns it. Body is the message's JSON
// when BodyEncoding is "json", a JSON string holding the body's text when
// it is "utf-8", and the standard base64 of the body when it is "base64".
// idem timers ls --json and idem dlq --json print the same shape.
type Envelope = inspect.Envelope

// DeadLetter is a dead letter as the API returns it: id, envelope, reason,
// error, saga_type, key, attempts, first_failed_at, last_failed_at,
// first_reason, first_error, replays, history (see History) and state
// (unresolved, resolved when the latest replay succeeded or was a
// duplicate, or pending when it is pending). idem dlq ls --json and idem dlq show --json print the
// same shape.
type DeadLetter = inspect.DeadLetter

// DeadLetterList is the answer of GET /api/dead-letters.
type DeadLetterList struct {
	DeadLetters []DeadLetter `json:"dead_letters"`
	Next        string       `json:"next,omitempty"`
}

// Message is the request body of POST /api/messages.
type Message struct {
	// ID identifies the message; submitting the same ID again is a
	// duplicate, applied once. Required.
	ID string `json:"id"`
	// Type is the message type, as saga.MessageType names it
	// ("orders.OrderPlaced"). Required.
	Type string `json:"type"`
	// Body is the message as JSON. Required.
	Body json.RawMessage `json:"body"`
	// CorrelationID is the saga key; when empty and a saga consumes Type,
	// it is computed from Body.
	CorrelationID string `json:"correlation_id,omitempty"`
	// IdempotencyKey, when set, is the deduplication identity instead of ID.
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Headers        map[string]string `json:"headers,omitempty"`
	// Token, when true, mints a dedup token for the message before
	// publishing it (Engine.PublishWithTokens): a copy submitted or
	// delivered after the message was applied is a duplicate however
	// late, not only within the retention. Needs a store that keeps
	// tokens (memory, SQLite, PostgreSQL).
	Token bool `json:"token,omitempty"`
}

// Accepted is the answer of POST /api/messages (202).
type Accepted struct {
	ID string `json:"id"`
	// DedupID is the identity the engine deduplicates by.
	DedupID string `json:"dedup_id"`
	Type    string `json:"type"`
	// Saga is the saga type that consumes Type; empty when no saga of
	// this engine does (a handler may, or the message is dead-lettered
	// with reason unknown_type).
	Saga string `json:"saga,omitempty"`
	Key  string `json:"key,omitempty"`
}

func toInstance(in *store.Instance) Instance {
	out := Instance{
		SagaType: in.SagaType, Key: in.Key, State: in.State, Status: in.Status(), Data: in.Data,
		SchemaVersion: in.SchemaVersion, Version: in.Version, Timers: in.Timers, Attributes: in.Attributes,
		CreatedAt: in.CreatedAt.UTC(), UpdatedAt: in.UpdatedAt.UTC(), FinishedAt: in.FinishedAt.UTC(),
	}
	if in.FinishedAt.IsZero() {
		out.FinishedAt = time.Time{}
	}
	if !json.Valid(in.Data) {
		b, _ := json.Marshal(string(in.Data)) // shown, never dropped
		out.Data = b
	}
	return out
}

// parseLimit reads ?limit=, default 100, at most 1000.
func parseLimit(w http.ResponseWriter, r *http.Request) (int, bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return defaultLimit, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxLimit {
		writeError(w, http.StatusBadRequest, "limit %q is not a number from 1 to %d: pass limit=100, say", v, maxLimit)
		return 0, false
	}
	return n, true
}

const submitExample = `{"id": "order-1-placed", "type": "orders.OrderPlaced", "body": {"OrderID": "order-1", "Items": 2}}`

func joinAnd(xs []string) string {
	switch len(xs) {
	case 1:
		return xs[0]
	case 2:
		return xs[0] + " and " + xs[1]
	}
	return xs[0] + ", " + xs[1] + " and " + xs[2]
}

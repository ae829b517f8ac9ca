package store

import (
	"time"
)

// JournalDetail is what a journal entry records beyond the transition: the
// message, what the step emitted, the state change and who caused it.
// Every field is optional; the zero value records nothing. The engine
// bounds Payload, Headers and State (Config.JournalPayloadLimit) before it
// writes them; a store keeps what it is given, byte for byte, including
// U+0000 and invalid UTF-8.
type JournalDetail struct {
	// Payload is the message body, or its first bytes when
	// PayloadTruncated.
	Payload          []byte `json:"payload,omitempty"`
	PayloadTruncated bool   `json:"payload_truncated,omitempty"`
	// Headers are the message's headers, or some of them when
	// HeadersTruncated.
	Headers          map[string]string `json:"headers,omitempty"`
	HeadersTruncated bool              `json:"headers_truncated,omitempty"`
	CausationID      string            `json:"causation_id,omitempty"`
	CorrelationID    string            `json:"correlation_id,omitempty"`
	// Emitted lists the messages the step emitted, in emission order.
	Emitted []EmittedMessage `json:"emitted,omitempty"`
	// State is the saga's state document after the step, or its first
	// bytes when StateTruncated. The engine records it instead of a diff:
	// copying it costs the step nothing worth measuring, and a reader
	// computes the change from one entry's State to the next
	// (internal/history.FillDiffs) only when somebody reads the history.
	State          []byte `json:"state,omitempty"`
	StateTruncated bool   `json:"state_truncated,omitempty"`
	// Diff is the state change as an RFC 6902 JSON patch from the state
	// before the step to the state after it. When DiffTruncated it holds
	// only the first operations, still a valid patch. Engines before
	// State recorded it at each step; readers now compute it from State.
	Diff          []byte `json:"diff,omitempty"`
	DiffTruncated bool   `json:"diff_truncated,omitempty"`
	// Duration is how long the step took.
	Duration time.Duration `json:"duration,omitempty"`
	// Actor is who caused the entry: "" for the engine, else the operator
	// (a console session or an API token's name).
	Actor string `json:"actor,omitempty"`
}

// EmittedMessage names one message a step emitted.
type EmittedMessage struct {
	// ID is the message's deterministic envelope ID.
	ID   string `json:"id"`
	Type string `json:"type"`
}

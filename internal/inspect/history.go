package inspect

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/internal/history"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// SagaHistory is the answer of GET /api/sagas/{type}/{key}/history and of the
// console's GET /instances/{type}/{key}/history.json: a saga's whole
// journal, oldest first, with each entry's detail.
type SagaHistory struct {
	SagaType string         `json:"saga_type"`
	Key      string         `json:"key"`
	Entries  []HistoryEntry `json:"entries"`
}

// HistoryEntry is one journal entry of a SagaHistory. Payload is the message
// body's JSON when PayloadEncoding is "json", a JSON string holding its
// text when "utf-8", and the standard base64 of its bytes when "base64"
// (a truncated JSON body is no longer JSON: it comes as "utf-8"). Diff is
// the state change as an RFC 6902 JSON patch, computed from the states the
// journal recorded. Headers' values that are not
// UTF-8 come with U+FFFD in place of their bad bytes.
type HistoryEntry struct {
	MessageID        string            `json:"message_id"`
	EventType        string            `json:"event_type"`
	FromState        string            `json:"from_state"`
	ToState          string            `json:"to_state"`
	Version          int64             `json:"version"`
	At               time.Time         `json:"at"`
	RawKey           string            `json:"raw_key,omitempty"`
	Payload          json.RawMessage   `json:"payload,omitempty"`
	PayloadEncoding  string            `json:"payload_encoding,omitempty"`
	PayloadTruncated bool              `json:"payload_truncated,omitempty"`
	Headers          map[string]string `json:"headers,omitempty"`
	HeadersTruncated bool              `json:"headers_truncated,omitempty"`
	CausationID      string            `json:"causation_id,omitempty"`
	CorrelationID    string            `json:"correlation_id,omitempty"`
	Emitted          []HistoryEmitted  `json:"emitted,omitempty"`
	Diff             json.RawMessage   `json:"diff,omitempty"`
	DiffTruncated    bool              `json:"diff_truncated,omitempty"`
	// StateTruncated says that the state after the step was over the
	// engine's Config.JournalPayloadLimit, so that the journal kept only
	// its first bytes and no diff can be computed to or from it.
	StateTruncated bool `json:"state_truncated,omitempty"`
	// DurationMicros is how long the step took, in microseconds.
	DurationMicros int64 `json:"duration_us,omitempty"`
	// Actor is who caused the entry: empty for the engine.
	Actor string `json:"actor,omitempty"`
}

// HistoryEmitted is a message a step emitted. Sent is "sent" (the
// transport accepted it, or the store's own queue took it with the step's
// commit), "pending" (in the outbox, not sent yet) or "unknown" (no longer
// in the outbox, or a store that cannot tell).
type HistoryEmitted struct {
	ID     string    `json:"id"`
	Type   string    `json:"type"`
	Sent   string    `json:"sent"`
	SentAt time.Time `json:"sent_at,omitzero"`
}

// Sent states of HistoryEmitted.
const (
	SentYes     = "sent"
	SentPending = "pending"
	SentUnknown = "unknown"
)

// HistoryDiffLimit bounds, in bytes, the diff the console computes for one
// journal entry from the states the engine recorded (each already bounded
// by Config.JournalPayloadLimit).
const HistoryDiffLimit = 64 << 10

// HistoryOf returns k's journal j as GET /api/sagas/{type}/{key}/history
// shows it (a JSON payload as JSON, not as the store's base64), for a
// reader with a store and no Server, such as idem sagas show --json. An
// emitted message's sent state comes from st's outbox when st can tell
// (readmodel.OutboxSentReader): "unknown" for one that is not there, as on
// the store's own queue, which only the admin Server knows the engine uses. It
// sets the Diff of j's entries from their states (history.FillDiffs). The
// error is the outbox's.
func HistoryOf(ctx context.Context, st store.Store, k store.Key, j []store.JournalEntry) (*SagaHistory, error) {
	sent := map[string]SentState{}
	if ids := EmittedIDs(j); len(ids) > 0 {
		r, _ := st.(readmodel.OutboxSentReader)
		if err := OutboxSent(ctx, r, ids, sent); err != nil {
			return nil, fmt.Errorf("inspect: history of saga %s/%s: read the outbox's sent state: %w", k.SagaType, k.Key, err)
		}
	}
	history.FillDiffs(j, HistoryDiffLimit)
	return &SagaHistory{SagaType: k.SagaType, Key: k.Key, Entries: HistoryEntries(j, sent)}, nil
}

// HistoryEntries are the journal's entries with the sent states of what they
// emitted.
func HistoryEntries(j []store.JournalEntry, sent map[string]SentState) []HistoryEntry {
	out := make([]HistoryEntry, 0, len(j))
	for i := range j {
		out = append(out, historyEntry(&j[i], sent))
	}
	return out
}

// EmittedIDs are the IDs of the messages the journal's entries emitted.
func EmittedIDs(j []store.JournalEntry) []string {
	var ids []string
	for i := range j {
		for _, m := range j[i].Emitted {
			ids = append(ids, m.ID)
		}
	}
	return ids
}

// SentState is an emitted message's sent state and time.
type SentState struct {
	State string
	At    time.Time
}

// OutboxSent adds to out the sent state of the messages ids names that
// the store's outbox holds, when it can tell (r is not nil).
func OutboxSent(ctx context.Context, r readmodel.OutboxSentReader, ids []string, out map[string]SentState) error {
	if r == nil {
		return nil
	}
	got, err := r.OutboxSent(ctx, ids)
	if err != nil {
		return err
	}
	for id, at := range got {
		if at.IsZero() {
			out[id] = SentState{State: SentPending}
		} else {
			out[id] = SentState{State: SentYes, At: at.UTC()}
		}
	}
	return nil
}

// historyEntry is j with the sent states of what it emitted.
func historyEntry(j *store.JournalEntry, sent map[string]SentState) HistoryEntry {
	e := HistoryEntry{
		MessageID: j.MessageID, EventType: j.EventType, FromState: j.FromState, ToState: j.ToState, Version: j.Version, At: j.At.UTC(), RawKey: j.RawKey,
		PayloadTruncated: j.PayloadTruncated, Headers: j.Headers, HeadersTruncated: j.HeadersTruncated, CausationID: j.CausationID,
		CorrelationID: j.CorrelationID, DiffTruncated: j.DiffTruncated, StateTruncated: j.StateTruncated, DurationMicros: j.Duration.Microseconds(), Actor: j.Actor,
	}
	if len(j.Payload) > 0 {
		e.Payload, e.PayloadEncoding = EncodePayload(j.Payload)
	}
	if json.Valid(j.Diff) {
		e.Diff = j.Diff
	}
	for _, m := range j.Emitted {
		st, ok := sent[m.ID]
		if !ok {
			st.State = SentUnknown
		}
		e.Emitted = append(e.Emitted, HistoryEmitted{ID: m.ID, Type: m.Type, Sent: st.State, SentAt: st.At})
	}
	return e
}

// EncodePayload is b as JSON, as a JSON string of its text, or as a JSON
// string of its base64, with the encoding's name.
func EncodePayload(b []byte) (json.RawMessage, string) {
	switch {
	case json.Valid(b) && utf8.Valid(b): // json.Valid takes bytes that are not UTF-8 in strings
		return b, "json"
	case utf8.Valid(b):
		out, _ := json.Marshal(string(b)) // a string always marshals
		return out, "utf-8"
	}
	out, _ := json.Marshal(base64.StdEncoding.EncodeToString(b))
	return out, "base64"
}

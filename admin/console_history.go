package admin

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/internal/history"
	"github.com/idemhq/idem/internal/inspect"
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
	sentYes     = "sent"
	sentPending = "pending"
	sentUnknown = "unknown"
)

// routeHistory adds the history downloads: the console's (session auth)
// and the API's (token auth).
func (s *Server) routeHistory() {
	s.mux.Handle("GET /instances/{type}/{key}/history.json", s.consolePage(s.downloadHistory))
	s.mux.Handle("GET /api/sagas/{type}/{key}/history", s.authorize(http.HandlerFunc(s.apiHistory)))
}

func (s *Server) apiHistory(w http.ResponseWriter, r *http.Request) {
	typ, raw := r.PathValue("type"), r.PathValue("key")
	key, err := canonKey(raw, s.e.MaxKeyLen())
	if err != nil {
		writeError(w, http.StatusBadRequest, "saga key %q is not a valid key (%v): path-escape the key as it appears in GET /api/sagas", raw, err)
		return
	}
	s.writeHistory(w, r, store.Key{SagaType: typ, Key: key}, false)
}

func (s *Server) downloadHistory(w http.ResponseWriter, r *http.Request) {
	key, err := canonKey(r.PathValue("key"), maxFieldLen)
	if err != nil {
		s.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return
	}
	s.writeHistory(w, r, store.Key{SagaType: r.PathValue("type"), Key: key}, true)
}

// writeHistory answers with k's SagaHistory, as a download when attach.
func (s *Server) writeHistory(w http.ResponseWriter, r *http.Request, k store.Key, attach bool) {
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	in, err := s.load(ctx, k)
	if err == nil && in == nil {
		writeError(w, http.StatusNotFound, "no saga %s with key %q: list the sagas with GET /api/sagas?type=%s", k.SagaType, k.Key, k.SagaType)
		return
	}
	var h *SagaHistory
	if err == nil {
		h, err = s.history(ctx, k)
	}
	if err != nil {
		s.internalError(w, r, fmt.Sprintf("read the history of saga %s/%s", k.SagaType, k.Key), err)
		return
	}
	if attach {
		w.Header().Set("Content-Disposition", `attachment; filename="`+historyFileName(k.SagaType, k.Key)+`"`)
	}
	writeJSON(w, http.StatusOK, h)
}

// historyDiffLimit bounds, in bytes, the diff the console computes for one
// journal entry from the states the engine recorded (each already bounded
// by Config.JournalPayloadLimit).
const historyDiffLimit = 64 << 10

// history reads k's journal and the sent state of what it emitted.
func (s *Server) history(ctx context.Context, k store.Key) (*SagaHistory, error) {
	j, err := s.st.Journal(ctx, k)
	if err != nil {
		return nil, fmt.Errorf("journal %s/%s: %w", k.SagaType, k.Key, err)
	}
	history.FillDiffs(j, historyDiffLimit)
	return &SagaHistory{SagaType: k.SagaType, Key: k.Key, Entries: s.historyEntries(ctx, j)}, nil
}

// historyEntries are the journal's entries with the sent state of what
// they emitted.
func (s *Server) historyEntries(ctx context.Context, j []store.JournalEntry) []HistoryEntry {
	return entriesOf(j, s.sentStates(ctx, j))
}

// sentState is an emitted message's sent state and time.
type sentState struct {
	state string
	at    time.Time
}

// sentStates looks up the sent state of every message the journal says was
// emitted. A lookup that fails leaves them unknown: the history is still
// worth showing.
func (s *Server) sentStates(ctx context.Context, j []store.JournalEntry) map[string]sentState {
	ids := emittedIDs(j)
	out := make(map[string]sentState, len(ids))
	if len(ids) == 0 {
		return out
	}
	if s.onStoreQueue() { // enqueued in the commit that journaled them
		for _, id := range ids {
			out[id] = sentState{state: sentYes}
		}
		return out
	}
	if err := outboxSent(ctx, s.caps.outboxSent, ids, out); err != nil {
		s.log.WarnContext(ctx, "admin: read the outbox's sent state; shown as unknown", "error", err)
	}
	return out
}

// outboxSent adds to out the sent state of the messages ids names that
// the store's outbox holds, when it can tell (r is not nil).
func outboxSent(ctx context.Context, r readmodel.OutboxSentReader, ids []string, out map[string]sentState) error {
	if r == nil {
		return nil
	}
	got, err := r.OutboxSent(ctx, ids)
	if err != nil {
		return err
	}
	for id, at := range got {
		if at.IsZero() {
			out[id] = sentState{state: sentPending}
		} else {
			out[id] = sentState{state: sentYes, at: at.UTC()}
		}
	}
	return nil
}

// onStoreQueue tells whether the engine's transport is its store's own
// queue, which takes emitted messages in the commit that emits them.
func (s *Server) onStoreQueue() bool {
	q := s.caps.storeQueue
	tr := s.e.Transport()
	return q != nil && tr != nil && reflect.TypeOf(q).Comparable() && reflect.TypeOf(tr).Comparable() && any(q) == any(tr)
}

func historyEntry(j *store.JournalEntry, sent map[string]sentState) HistoryEntry {
	e := HistoryEntry{
		MessageID: j.MessageID, EventType: j.EventType, FromState: j.FromState, ToState: j.ToState, Version: j.Version, At: j.At.UTC(), RawKey: j.RawKey,
		PayloadTruncated: j.PayloadTruncated, Headers: j.Headers, HeadersTruncated: j.HeadersTruncated, CausationID: j.CausationID,
		CorrelationID: j.CorrelationID, DiffTruncated: j.DiffTruncated, StateTruncated: j.StateTruncated, DurationMicros: j.Duration.Microseconds(), Actor: j.Actor,
	}
	if len(j.Payload) > 0 {
		e.Payload, e.PayloadEncoding = encodePayload(j.Payload)
	}
	if json.Valid(j.Diff) {
		e.Diff = j.Diff
	}
	for _, m := range j.Emitted {
		st, ok := sent[m.ID]
		if !ok {
			st.state = sentUnknown
		}
		e.Emitted = append(e.Emitted, HistoryEmitted{ID: m.ID, Type: m.Type, Sent: st.state, SentAt: st.at})
	}
	return e
}

// encodePayload is b as JSON, as a JSON string of its text, or as a JSON
// string of its base64, with the encoding's name.
func encodePayload(b []byte) (json.RawMessage, string) {
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

// historyRow is a journal entry as the instance page shows it.
type historyRow struct {
	HistoryEntry
	// PayloadText is the payload to show: indented when JSON, else its
	// text, quoted with Go escapes when it is not UTF-8.
	PayloadText string
	HeaderList  [][2]string
	Ops         []diffOp
	// EndReason is the reason an operator gave for ending the saga, on
	// the entry that ended it.
	EndReason string
	Duration  time.Duration
}

// diffOp is one operation of a diff, its value as compact JSON.
type diffOp struct {
	Op, Path, From, Value string
}

// historyRows are the journal's entries as the instance page shows them.
func (s *Server) historyRows(ctx context.Context, j []store.JournalEntry) []historyRow {
	entries := s.historyEntries(ctx, j)
	rows := make([]historyRow, len(entries))
	for i, e := range entries {
		rows[i] = historyRow{HistoryEntry: e, Duration: time.Duration(e.DurationMicros) * time.Microsecond}
		rows[i].PayloadText = payloadText(e.Payload, e.PayloadEncoding)
		for _, name := range slices.Sorted(maps.Keys(e.Headers)) {
			rows[i].HeaderList = append(rows[i].HeaderList, [2]string{name, e.Headers[name]})
		}
		rows[i].Ops = diffOps(e.Diff)
		if e.EventType == inspect.EndEventType && e.PayloadEncoding == "json" {
			var end struct {
				Reason string `json:"reason"`
			}
			if json.Unmarshal(e.Payload, &end) == nil {
				rows[i].EndReason = end.Reason
			}
		}
	}
	return rows
}

func payloadText(p json.RawMessage, encoding string) string {
	switch encoding {
	case "json":
		return prettyJSON(p)
	case "utf-8":
		var s string
		_ = json.Unmarshal(p, &s)
		return s
	case "base64":
		var s string
		_ = json.Unmarshal(p, &s)
		b, _ := base64.StdEncoding.DecodeString(s)
		q := strconv.Quote(string(b))
		return q[1 : len(q)-1]
	}
	return ""
}

// diffOps lists a JSON patch's operations; nil when it is none.
func diffOps(patch json.RawMessage) []diffOp {
	var ops []struct {
		Op    string          `json:"op"`
		Path  string          `json:"path"`
		From  string          `json:"from"`
		Value json.RawMessage `json:"value"`
	}
	if len(patch) == 0 || json.Unmarshal(patch, &ops) != nil {
		return nil
	}
	out := make([]diffOp, len(ops))
	for i, o := range ops {
		out[i] = diffOp{Op: o.Op, Path: o.Path, From: o.From, Value: compactJSON(o.Value)}
	}
	return out
}

package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/history"
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

func (s *parts) storeCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.timeout)
}

func (s *api) listSagas(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	p := &store.ListParams{SagaType: q.Get("type"), State: q.Get("state"), Limit: limit}
	if a := q.Get("after"); a != "" {
		c, err := decodeCursor(a)
		if err != nil {
			writeError(w, http.StatusBadRequest, "after: %v", err)
			return
		}
		p.After = inspect.ListAfter(c)
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	ins, err := s.st.ListInstances(ctx, p)
	if err != nil {
		s.internalError(w, r, "list sagas", err)
		return
	}
	out := SagaList{Sagas: make([]Instance, 0, len(ins))}
	for _, in := range ins {
		out.Sagas = append(out.Sagas, toInstance(in))
	}
	if len(ins) == limit {
		out.Next = encodeCursor(ins[len(ins)-1])
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *api) getSaga(w http.ResponseWriter, r *http.Request) {
	typ, raw := r.PathValue("type"), r.PathValue("key")
	key, err := canonKey(raw, s.e.MaxKeyLen())
	if err != nil {
		writeError(w, http.StatusBadRequest, "saga key %q is not a valid key (%v): path-escape the key as it appears in GET /api/sagas", raw, err)
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	k := store.Key{SagaType: typ, Key: key}
	in, err := s.load(ctx, k)
	if err != nil {
		s.internalError(w, r, fmt.Sprintf("load saga %s/%s", typ, key), err)
		return
	}
	if in == nil {
		writeError(w, http.StatusNotFound, "no saga %s with key %q: list the sagas with GET /api/sagas?type=%s", typ, key, typ)
		return
	}
	j, err := s.st.Journal(ctx, k)
	if err != nil {
		s.internalError(w, r, fmt.Sprintf("read the journal of saga %s/%s", typ, key), err)
		return
	}
	if j == nil {
		j = []store.JournalEntry{}
	}
	history.FillDiffs(j, inspect.HistoryDiffLimit)
	writeJSON(w, http.StatusOK, Saga{Saga: toInstance(in), Journal: j})
}

// load reads one instance in a unit of work it rolls back; nil when absent.
func (s *parts) load(ctx context.Context, k store.Key) (*store.Instance, error) {
	uow, err := s.st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = uow.Rollback(ctx) }()
	res, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}})
	if err != nil {
		return nil, err
	}
	return res.Instances[k], nil
}

func (s *api) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	dls, err := s.st.ListDeadLetters(ctx, &store.ListParams{SagaType: q.Get("type"), After: q.Get("after"), Limit: limit})
	if err != nil {
		s.internalError(w, r, "list dead letters", err)
		return
	}
	out := DeadLetterList{DeadLetters: make([]DeadLetter, 0, len(dls))}
	for i := range dls {
		out.DeadLetters = append(out.DeadLetters, inspect.DeadLetterOf(&dls[i]))
	}
	if len(dls) == limit {
		out.Next = dls[len(dls)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *api) getDeadLetter(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	d, err := s.st.GetDeadLetter(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no dead letter with ID %q: list them with GET /api/dead-letters", id)
		return
	}
	if err != nil {
		s.internalError(w, r, "get dead letter", err)
		return
	}
	writeJSON(w, http.StatusOK, inspect.DeadLetterOf(d))
}

func (s *api) replayDeadLetter(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	replay := s.e.ReplayDeadLetter
	if f := r.URL.Query().Get("force"); f == "true" || f == "1" {
		replay = s.e.ForceReplayDeadLetter
	}
	err := replay(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no dead letter with ID %q: list them with GET /api/dead-letters", id)
		return
	}
	if msg := replayRefused(err); msg != "" {
		writeError(w, http.StatusConflict, "dead letter %q: %s", id, msg)
		return
	}
	if err != nil {
		s.internalError(w, r, "replay dead letter", err)
		return
	}
	writeJSON(w, http.StatusAccepted, requeued(id))
}

func (s *api) deleteDeadLetter(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	n, err := s.st.DeleteDeadLetters(ctx, []string{id})
	if err != nil {
		s.internalError(w, r, "delete dead letter", err)
		return
	}
	if n == 0 {
		writeError(w, http.StatusNotFound, "no dead letter with ID %q: list them with GET /api/dead-letters", id)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": id})
}

const submitExample = `{"id": "order-1-placed", "type": "orders.OrderPlaced", "body": {"OrderID": "order-1", "Items": 2}}`

func (s *api) submit(w http.ResponseWriter, r *http.Request) {
	w, r, end := s.traceRequest(w, r, "/api/messages")
	defer end()
	// A JSON content type forces browsers to preflight, which no origin
	// passes: a web page cannot submit messages.
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "Content-Type %q is not application/json: send the message as JSON with Content-Type: application/json", r.Header.Get("Content-Type"))
		return
	}
	m, ok := s.decodeMessage(w, r)
	if !ok {
		return
	}
	env := idem.Envelope{ID: m.ID, Type: m.Type, CorrelationID: m.CorrelationID, IdempotencyKey: m.IdempotencyKey, Headers: m.Headers, Body: m.Body}
	acc := Accepted{ID: env.ID, DedupID: env.DedupID(), Type: env.Type}
	if mach := s.consumer(m.Type); mach != nil {
		_, rawKey, err := mach.Decode(m.Type, m.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "body does not fit message type %s of saga %s: %v: fix the body and submit again", m.Type, mach.Name(), err)
			return
		}
		key, err := canonKey(rawKey, s.e.MaxKeyLen())
		if err != nil {
			writeError(w, http.StatusBadRequest, "body of %s gives saga %s the key %q, which is not valid (%v): fix the body and submit again", m.Type, mach.Name(), rawKey, err)
			return
		}
		acc.Saga, acc.Key = mach.Name(), key
		if env.CorrelationID == "" {
			env.CorrelationID = rawKey
		}
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	publish := s.e.Publish
	if m.Token {
		publish = s.e.PublishWithTokens
	}
	if err := publish(ctx, env); err != nil {
		if errors.Is(err, idem.ErrInvalidEnvelope) || errors.Is(err, idem.ErrNoTokens) {
			writeError(w, http.StatusBadRequest, "message %q was not stored: %v", env.ID, err)
			return
		}
		s.log.ErrorContext(ctx, "admin: publish a submitted message", "message_id", env.ID, "error", err)
		writeError(w, http.StatusServiceUnavailable, "message %q was not stored: the queue refused it (see the server log): submit it again with the same id, which is safe", env.ID)
		return
	}
	writeJSON(w, http.StatusAccepted, acc)
}

// decodeMessage reads and checks the request body; it answers the client
// itself when the body is not acceptable.
func (s *api) decodeMessage(w http.ResponseWriter, r *http.Request) (*Message, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "request body exceeds %d bytes: send a smaller message", s.maxBody)
		return nil, false
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "read the request body: %v: send the message again", err)
		return nil, false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	var m Message
	if err := dec.Decode(&m); err != nil {
		writeError(w, http.StatusBadRequest, "request body is not a valid message (%v): send a JSON object like %s", err, submitExample)
		return nil, false
	}
	if dec.More() {
		writeError(w, http.StatusBadRequest, "request body holds more than one JSON value: send one message per request, like %s", submitExample)
		return nil, false
	}
	var missing []string
	if m.ID == "" {
		missing = append(missing, "id")
	}
	if m.Type == "" {
		missing = append(missing, "type")
	}
	if len(m.Body) == 0 || string(m.Body) == "null" {
		missing = append(missing, "body")
	}
	if len(missing) > 0 {
		writeError(w, http.StatusBadRequest, "message has no %s: id, type and body are required, like %s", joinAnd(missing), submitExample)
		return nil, false
	}
	for name, v := range map[string]string{"id": m.ID, "type": m.Type, "correlation_id": m.CorrelationID, "idempotency_key": m.IdempotencyKey} {
		limit := maxFieldLen
		if name == "correlation_id" {
			// A saga key, which the engine bounds by its own limit.
			limit = max(limit, s.e.MaxKeyLen())
		}
		if len(v) > limit {
			writeError(w, http.StatusBadRequest, "%s is %d bytes long: at most %d are accepted", name, len(v), limit)
			return nil, false
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, m.Body); err == nil {
		m.Body = compact.Bytes()
	}
	return &m, true
}

// consumer returns the registered saga machine consuming msgType, or nil.
func (s *api) consumer(msgType string) idem.Machine {
	for _, m := range s.e.Sagas() {
		if slices.Contains(m.MessageTypes(), msgType) {
			return m
		}
	}
	return nil
}

func joinAnd(xs []string) string {
	switch len(xs) {
	case 1:
		return xs[0]
	case 2:
		return xs[0] + " and " + xs[1]
	}
	return xs[0] + ", " + xs[1] + " and " + xs[2]
}

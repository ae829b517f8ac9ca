package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/history"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

func (a *api) listSagas(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	p := &store.ListParams{SagaType: q.Get("type"), State: q.Get("state"), Limit: limit}
	if after := q.Get("after"); after != "" {
		c, err := decodeCursor(after)
		if err != nil {
			writeError(w, http.StatusBadRequest, "after: %v", err)
			return
		}
		p.After = inspect.ListAfter(c)
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	ins, err := a.st.ListInstances(ctx, p)
	if err != nil {
		a.internalError(w, r, "list sagas", err)
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

func (a *api) getSaga(w http.ResponseWriter, r *http.Request) {
	k, ok := a.sagaParam(w, r)
	if !ok {
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	in, err := a.load(ctx, k)
	if err != nil {
		a.internalError(w, r, fmt.Sprintf("load saga %s/%s", k.SagaType, k.Key), err)
		return
	}
	if in == nil {
		writeError(w, http.StatusNotFound, "no saga %s with key %q: list the sagas with GET /api/sagas?type=%s", k.SagaType, k.Key, k.SagaType)
		return
	}
	j, err := a.st.Journal(ctx, k)
	if err != nil {
		a.internalError(w, r, fmt.Sprintf("read the journal of saga %s/%s", k.SagaType, k.Key), err)
		return
	}
	if j == nil {
		j = []store.JournalEntry{}
	}
	history.FillDiffs(j, inspect.HistoryDiffLimit)
	writeJSON(w, http.StatusOK, Saga{Saga: toInstance(in), Journal: j})
}

// querySagas serves GET /api/sagas: the plain listing, or with status,
// prefix, stuck, reason, idle or attr the filtered query whose cursor is
// opaque. With stuck=true, reason (inspect.StuckReasons) and idle (a Go
// duration) filter as the console's stuck view does: an urgent reason
// lists its sagas most urgent first, one page with no cursor.
func (a *api) querySagas(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !slices.ContainsFunc([]string{"status", "prefix", "stuck", "reason", "idle"}, func(k string) bool { return q.Get(k) != "" }) && len(attrFilters(q)) == 0 {
		a.listSagas(w, r)
		return
	}
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	p, sf, err := stuckQuery(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	p.Limit = limit
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	var ins []*store.Instance
	if now := time.Now(); sf.urgent() {
		ins, err = a.urgentActive(ctx, sf.Reason, p.SagaType, now, limit)
	} else {
		sf.bound(p, now)
		ins, err = inspect.Instances(ctx, a.st, p)
	}
	if errors.Is(err, inspect.ErrUnsupported) {
		writeError(w, http.StatusNotImplemented, "%v: drop stuck=, reason= and idle=, or use a store that implements it", err)
		return
	}
	if err != nil {
		a.internalError(w, r, "query sagas", err)
		return
	}
	out := SagaList{Sagas: make([]Instance, 0, len(ins))}
	for _, in := range ins {
		out.Sagas = append(out.Sagas, toInstance(in))
	}
	if len(ins) == limit && !sf.urgent() {
		out.Next = encodeCursor(ins[len(ins)-1])
	}
	writeJSON(w, http.StatusOK, out)
}

// stuckQuery reads the instance filter of q with the stuck view's reason
// and idle time, checked together.
func stuckQuery(q url.Values) (*readmodel.InstanceQuery, stuckFilter, error) {
	p, err := instanceQuery(q)
	if err != nil {
		return nil, stuckFilter{}, err
	}
	sf, err := parseStuckFilter(q)
	if err == nil {
		err = sf.check(p.Stuck, q)
	}
	return p, sf, err
}

func (a *api) submit(w http.ResponseWriter, r *http.Request) {
	w, r, end := a.traceRequest(w, r, "/api/messages")
	defer end()
	// A JSON content type forces browsers to preflight, which no origin
	// passes: a web page cannot submit messages.
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, "Content-Type %q is not application/json: send the message as JSON with Content-Type: application/json", r.Header.Get("Content-Type"))
		return
	}
	m, ok := a.decodeMessage(w, r)
	if !ok {
		return
	}
	env := idem.Envelope{ID: m.ID, Type: m.Type, CorrelationID: m.CorrelationID, IdempotencyKey: m.IdempotencyKey, Headers: m.Headers, Body: m.Body}
	acc := Accepted{ID: env.ID, DedupID: env.DedupID(), Type: env.Type}
	if mach := a.consumer(m.Type); mach != nil {
		_, rawKey, err := mach.Decode(m.Type, m.Body)
		if err != nil {
			writeError(w, http.StatusBadRequest, "body does not fit message type %s of saga %s: %v: fix the body and submit again", m.Type, mach.Name(), err)
			return
		}
		key, err := canonKey(rawKey, a.e.Config().MaxKeyLen)
		if err != nil {
			writeError(w, http.StatusBadRequest, "body of %s gives saga %s the key %q, which is not valid (%v): fix the body and submit again", m.Type, mach.Name(), rawKey, err)
			return
		}
		acc.Saga, acc.Key = mach.Name(), key
		if env.CorrelationID == "" {
			env.CorrelationID = rawKey
		}
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	publish := a.e.Publish
	if m.Token {
		publish = a.e.PublishWithTokens
	}
	if err := publish(ctx, env); err != nil {
		if errors.Is(err, idem.ErrInvalidEnvelope) || errors.Is(err, idem.ErrNoTokens) {
			writeError(w, http.StatusBadRequest, "message %q was not stored: %v", env.ID, err)
			return
		}
		a.log.ErrorContext(ctx, "admin: publish a submitted message", "message_id", env.ID, "error", err)
		writeError(w, http.StatusServiceUnavailable, "message %q was not stored: the queue refused it (see the server log): submit it again with the same id, which is safe", env.ID)
		return
	}
	writeJSON(w, http.StatusAccepted, acc)
}

// decodeMessage reads and checks the request body; it answers the client
// itself when the body is not acceptable.
func (a *api) decodeMessage(w http.ResponseWriter, r *http.Request) (*Message, bool) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.maxBody))
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		writeError(w, http.StatusRequestEntityTooLarge, "request body exceeds %d bytes: send a smaller message", a.maxBody)
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
			limit = max(limit, a.e.Config().MaxKeyLen)
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
func (a *api) consumer(msgType string) idem.Machine {
	for _, m := range a.e.Sagas() {
		if slices.Contains(m.MessageTypes(), msgType) {
			return m
		}
	}
	return nil
}

// apiActor names the API caller for the journal.
func (a *api) apiActor(r *http.Request) (string, error) {
	who := "api"
	if !a.auth {
		who = "api (loopback)"
	}
	name := r.Header.Get(ActorHeader)
	if name == "" {
		return who, nil
	}
	if len(name) > 100 || !utf8.ValidString(name) || strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return "", fmt.Errorf("header %s: at most 100 bytes of printable UTF-8", ActorHeader)
	}
	return who + ": " + name, nil
}

func (a *api) apiEndSaga(w http.ResponseWriter, r *http.Request) {
	var body EndSaga
	k, actor, ok := a.actionRequest(w, r, &body, `{"reason": "why it is ended"}`)
	if !ok {
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	entry, err := inspect.EndSaga(ctx, a.st, k, &inspect.End{Reason: body.Reason, Actor: actor, Version: body.Version, Now: time.Now()})
	if status, msg := endError(k, err); status != 0 {
		if status == http.StatusInternalServerError {
			a.internalError(w, r, "end saga", err)
			return
		}
		writeError(w, status, "%s", msg)
		return
	}
	writeJSON(w, http.StatusOK, entry)
}

func (a *api) apiSendEvent(w http.ResponseWriter, r *http.Request) {
	var body SendEvent
	k, actor, ok := a.actionRequest(w, r, &body, `{"type": "...", "body": {...}}`)
	if !ok {
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	env, status, err := a.sendEvent(ctx, k, &body, actor)
	if err != nil {
		if status == http.StatusServiceUnavailable {
			a.log.ErrorContext(ctx, "admin: send an event to a saga", "saga_type", k.SagaType, "error", err)
		}
		writeError(w, status, "%v", err)
		return
	}
	writeJSON(w, http.StatusAccepted, Accepted{ID: env.ID, DedupID: env.DedupID(), Type: env.Type, Saga: k.SagaType, Key: k.Key})
}

func (a *api) apiSelectSagas(w http.ResponseWriter, r *http.Request) {
	q, err := a.batchQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	sel, err := inspect.SelectSagas(ctx, a.st, q)
	if err != nil {
		a.internalError(w, r, "select sagas", err)
		return
	}
	if sel.Sagas == nil {
		sel.Sagas = []inspect.SagaVersion{}
	}
	writeJSON(w, http.StatusOK, struct {
		Count int `json:"count"`
		*inspect.Selection
	}{len(sel.Sagas), sel})
}

func (a *api) apiEndSagas(w http.ResponseWriter, r *http.Request) {
	var body EndSagas
	q, actor, ok := batchRequest(a, w, r, a.batchQuery, &body, `{"reason": "...", "digest": "<from GET /api/sagas/select>"}`)
	if !ok {
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	res, err := inspect.EndSagas(ctx, a.st, q, body.Digest, &inspect.End{Reason: body.Reason, Actor: actor, Now: time.Now()})
	switch {
	case errors.Is(err, inspect.ErrSetChanged):
		writeError(w, http.StatusConflict, "%v: count again with GET /api/sagas/select, then confirm", err)
	case errors.Is(err, inspect.ErrBadReason), errors.Is(err, inspect.ErrCapped):
		writeError(w, http.StatusBadRequest, "%v", err)
	case err != nil && res == nil:
		a.internalError(w, r, "end sagas", err)
	case err != nil:
		a.log.ErrorContext(ctx, "admin: end sagas", "ended", res.Done, "error", err)
		writeError(w, http.StatusServiceUnavailable, "%d sagas ended, then the store failed (see the server log): count again and confirm to end the rest", res.Done)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

func (a *api) apiHistory(w http.ResponseWriter, r *http.Request) {
	if k, ok := a.sagaParam(w, r); ok {
		a.writeHistory(w, r, k, false)
	}
}

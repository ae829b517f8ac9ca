package admin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
	"github.com/idemhq/idem/transport"
)

// ActorHeader is the request header an API caller may set to name who acts
// ("alice", "runbook-42"): the journal records "api: alice". At most 100
// bytes of printable UTF-8; anything else is refused.
const ActorHeader = "Idem-Actor"

// EndSagas is the body of POST /api/sagas/end?<filter>: it ends the active
// sagas the filter selects, once GET /api/sagas/select?<filter> counted
// them and answered Digest.
type EndSagas struct {
	Reason string `json:"reason"`
	// Digest is the selection's, as GET /api/sagas/select answered it: the
	// sagas counted that the filter still selects are ended, each at the
	// version counted; those that moved on are skipped (inspect.EndSagas).
	Digest string `json:"digest"`
}

// EndSaga is the body of POST /api/sagas/{type}/{key}/end.
type EndSaga struct {
	// Reason is required, at most 1,000 bytes: the journal keeps it.
	Reason string `json:"reason"`
	// Version, when set, ends the saga only if it is still at that version
	// (409 otherwise).
	Version int64 `json:"version,omitempty"`
}

// SendEvent is the body of POST /api/sagas/{type}/{key}/events: an event
// for the saga, which must correlate to it.
type SendEvent struct {
	// ID is the message ID; empty means a new random one. Sending again
	// with the same ID is safe: the saga applies it once.
	ID   string          `json:"id,omitempty"`
	Type string          `json:"type"`
	Body json.RawMessage `json:"body"`
}

// apiActor names the API caller for the journal.
func (s *api) apiActor(r *http.Request) (string, error) {
	who := "api"
	if !s.auth {
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

// consoleActor names the console user for the journal: the session by a
// digest of its ID (never the ID itself, which is a credential).
func consoleActor(r *http.Request) string {
	sess := sessionOf(r)
	if sess == nil {
		return "console (loopback)"
	}
	sum := sha256.Sum256([]byte(sess.id))
	return "console session " + hex.EncodeToString(sum[:4])
}

// sagaKeyOf reads the saga a request names.
func (s *parts) sagaKeyOf(r *http.Request) (store.Key, error) {
	typ, raw := r.PathValue("type"), r.PathValue("key")
	key, err := canonKey(raw, s.e.MaxKeyLen())
	if err != nil {
		return store.Key{}, fmt.Errorf("saga key %q is not a valid key: %w", raw, err)
	}
	return store.Key{SagaType: typ, Key: key}, nil
}

// actionRequest reads the saga, the actor and the JSON body of an action
// on one saga; it answers 400 itself, naming what is wrong, when one is
// not acceptable.
func (s *api) actionRequest(w http.ResponseWriter, r *http.Request, body any, shape string) (store.Key, string, bool) {
	k, err := s.sagaKeyOf(r)
	if err == nil {
		var actor string
		if actor, err = s.apiActor(r); err == nil {
			if err = json.NewDecoder(io.LimitReader(r.Body, s.maxBody)).Decode(body); err == nil {
				return k, actor, true
			}
			err = fmt.Errorf("%s: %w", shape, err)
		}
	}
	writeError(w, http.StatusBadRequest, "%v", err)
	return store.Key{}, "", false
}

func (s *api) apiEndSaga(w http.ResponseWriter, r *http.Request) {
	var body EndSaga
	k, actor, ok := s.actionRequest(w, r, &body, `request body is not {"reason": "why it is ended"}`)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	entry, err := inspect.EndSaga(ctx, s.st, k, &inspect.End{Reason: body.Reason, Actor: actor, Version: body.Version, Now: time.Now()})
	if status, msg := endError(k, err); status != 0 {
		if status == http.StatusInternalServerError {
			s.internalError(w, r, "end saga", err)
			return
		}
		writeError(w, status, "%s", msg)
		return
	}
	writeJSON(w, http.StatusOK, entry)
}

// endError maps EndSaga's error to a status and a sentence; 0 for none.
func endError(k store.Key, err error) (int, string) {
	switch {
	case err == nil:
		return 0, ""
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, fmt.Sprintf("no saga %s with key %q (it may have been swept)", k.SagaType, k.Key)
	case errors.Is(err, inspect.ErrFinished):
		return http.StatusConflict, fmt.Sprintf("saga %s/%q has finished already: there is nothing to end", k.SagaType, k.Key)
	case errors.Is(err, store.ErrConflict):
		return http.StatusConflict, fmt.Sprintf("saga %s/%q changed meanwhile: read it again, then end it", k.SagaType, k.Key)
	case errors.Is(err, inspect.ErrBadReason):
		return http.StatusBadRequest, err.Error()
	}
	return http.StatusInternalServerError, ""
}

func (s *api) apiSendEvent(w http.ResponseWriter, r *http.Request) {
	var body SendEvent
	k, actor, ok := s.actionRequest(w, r, &body, `request body is not {"type": "...", "body": {...}}`)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	env, status, err := s.sendEvent(ctx, k, &body, actor)
	if err != nil {
		if status == http.StatusServiceUnavailable {
			s.log.ErrorContext(ctx, "admin: send an event to a saga", "saga_type", k.SagaType, "error", err)
		}
		writeError(w, status, "%v", err)
		return
	}
	writeJSON(w, http.StatusAccepted, Accepted{ID: env.ID, DedupID: env.DedupID(), Type: env.Type, Saga: k.SagaType, Key: k.Key})
}

// sendEvent publishes ev to saga k on behalf of actor once it has checked
// that the saga's machine is registered here, takes the event's type, and
// that the body correlates to k. The status is the HTTP answer of an
// error.
func (s *parts) sendEvent(ctx context.Context, k store.Key, ev *SendEvent, actor string) (idem.Envelope, int, error) {
	m, ok := s.e.Sagas()[k.SagaType]
	if !ok {
		return idem.Envelope{}, http.StatusNotFound, fmt.Errorf("no saga type %s is registered with this engine", k.SagaType)
	}
	if !slices.Contains(m.MessageTypes(), ev.Type) {
		return idem.Envelope{}, http.StatusBadRequest, fmt.Errorf("saga %s takes no message of type %q: it takes %s", k.SagaType, ev.Type, strings.Join(m.MessageTypes(), ", "))
	}
	_, rawKey, err := m.Decode(ev.Type, ev.Body)
	if err != nil {
		return idem.Envelope{}, http.StatusBadRequest, fmt.Errorf("the body does not fit %s: %v", ev.Type, err)
	}
	if key, err := canonKey(rawKey, s.e.MaxKeyLen()); err != nil || key != k.Key {
		return idem.Envelope{}, http.StatusBadRequest, fmt.Errorf("the body correlates to saga key %q, not %q: fix the body", rawKey, k.Key)
	}
	id := ev.ID
	if id == "" {
		id = randomToken()
	}
	env := idem.Envelope{ID: id, Type: ev.Type, CorrelationID: rawKey, Body: ev.Body, Headers: map[string]string{transport.HeaderActor: actor}}
	if err := s.e.Publish(ctx, env); err != nil {
		if errors.Is(err, idem.ErrInvalidEnvelope) {
			return env, http.StatusBadRequest, fmt.Errorf("message %q was not sent: %w", id, err)
		}
		return env, http.StatusServiceUnavailable, fmt.Errorf("message %q was not sent: the queue refused it (see the server log): send it again with the same id, which is safe", id)
	}
	return env, 0, nil
}

// askAction answers an unconfirmed action's POST with the instance page
// asking about it (q: what the page's actions card reads). The form's
// values stay in the request body, never in a URL, where a body or a
// reason would reach browser history and access logs.
//
// The question is the instance page, at the instance page's address: the
// browser's history gets that address (HX-Replace-Url; htmx would record
// the action's, which has no page), and the page's own links (a timer's
// "back") carry it without the question's values.
func (s *console) askAction(w http.ResponseWriter, r *http.Request, q url.Values) {
	ask := r.Clone(r.Context())
	dir := path.Dir(r.URL.EscapedPath()) // /instances/{type}/{key}, escaped
	ask.Method, ask.URL.RawPath, ask.URL.RawQuery = http.MethodGet, dir, q.Encode()
	ask.URL.Path, _ = url.PathUnescape(dir)
	ask.RequestURI = basePath(r) + ask.URL.RequestURI() // what basePath reads
	w.Header().Set("HX-Replace-Url", basePath(r)+dir)
	s.pageInstance(w, ask)
}

// actionParams are the query parameters of an action's question, which the
// instance page's own links must not carry (a reason or a body in a URL
// reaches history and logs).
var actionParams = []string{"confirm", "reason", "version", "type", "body", "id"}

// actEndSaga ends the saga once the form says confirm=yes; before that the
// instance page asks.
func (s *console) actEndSaga(w http.ResponseWriter, r *http.Request) {
	k, err := s.sagaKeyOf(r)
	if err != nil {
		s.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return
	}
	page := basePath(r) + "/instances/" + url.PathEscape(k.SagaType) + "/" + url.PathEscape(k.Key)
	reason := r.PostFormValue("reason")
	if r.PostFormValue("confirm") != "yes" {
		s.askAction(w, r, url.Values{"confirm": {"end"}, "reason": {reason}, "version": {r.PostFormValue("version")}})
		return
	}
	var version int64
	if _, err := fmt.Sscan(r.PostFormValue("version"), &version); err != nil {
		s.consoleError(w, r, http.StatusBadRequest, "The form carries no version: open the saga again.")
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	_, err = inspect.EndSaga(ctx, s.st, k, &inspect.End{Reason: reason, Actor: consoleActor(r), Version: version, Now: time.Now()})
	if status, msg := endError(k, err); status == http.StatusInternalServerError {
		s.storeFailed(w, r, "end saga", err)
		return
	} else if status != 0 {
		s.consoleError(w, r, status, msg+".")
		return
	}
	http.Redirect(w, r, page+query("done", "ended", "n", "1"), http.StatusSeeOther)
}

// actSendEvent sends the event of the form once it says confirm=yes;
// before that the instance page asks, with the message ID it will have:
// confirming twice (a double click, a resubmission) sends one message.
func (s *console) actSendEvent(w http.ResponseWriter, r *http.Request) {
	k, err := s.sagaKeyOf(r)
	if err != nil {
		s.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return
	}
	page := basePath(r) + "/instances/" + url.PathEscape(k.SagaType) + "/" + url.PathEscape(k.Key)
	typ, body, id := r.PostFormValue("type"), r.PostFormValue("body"), r.PostFormValue("id")
	if r.PostFormValue("confirm") != "yes" {
		s.askAction(w, r, url.Values{"confirm": {"send"}, "type": {typ}, "body": {body}, "id": {randomToken()}})
		return
	}
	if id == "" {
		s.consoleError(w, r, http.StatusBadRequest, "The form carries no message ID: open the saga again.")
		return
	}
	if !json.Valid([]byte(body)) {
		s.consoleError(w, r, http.StatusBadRequest, "The body is not JSON: go back and fix it.")
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	if _, status, err := s.sendEvent(ctx, k, &SendEvent{ID: id, Type: typ, Body: json.RawMessage(body)}, consoleActor(r)); err != nil {
		if status == http.StatusServiceUnavailable {
			s.storeFailed(w, r, "send event", err)
			return
		}
		s.consoleError(w, r, status, "The event was not sent: "+err.Error())
		return
	}
	http.Redirect(w, r, page+query("done", "sent", "n", "1"), http.StatusSeeOther)
}

// actionsView is the instance page's actions card, with the question asked
// before an action when Confirm is set.
type actionsView struct {
	// Confirm is "end" or "send" while the page asks; "" otherwise.
	Confirm string
	// Reason, Type and Body are the form's values, carried to the question.
	Reason string
	Type   string
	Body   string
	// Events are the message types the saga's state accepts now, offered
	// first in the send form; Others the rest its machine takes.
	Events []string
	Others []string
	// Version and State are the saga's when the page was read: an end is
	// refused if the saga moved on since. Moved says it moved on since the
	// operator pressed End (the question shows it as it is now).
	Version  int64
	State    string
	Moved    bool
	Finished bool
	// ID is the message ID the question about a send carries.
	ID string
}

// actionsFor builds the actions card of saga in, whose Why panel is why.
func (s *console) actionsFor(r *http.Request, in *store.Instance, why *whyPanel) *actionsView {
	q := r.URL.Query()
	a := &actionsView{Reason: q.Get("reason"), Type: q.Get("type"), Body: q.Get("body"), ID: q.Get("id"), Version: in.Version, State: in.State,
		Finished: in.Status() == store.StatusFinished}
	if c := q.Get("confirm"); c == "end" || c == "send" {
		a.Confirm = c
	}
	// The version the operator read: a saga that moved on since is shown
	// as it is now, and asked about again.
	if v := q.Get("version"); a.Confirm == "end" && v != "" && v != fmt.Sprint(in.Version) {
		a.Moved = true
	}
	if why != nil {
		for _, e := range why.Accepts {
			a.Events = append(a.Events, e.Event)
		}
	}
	if m, ok := s.e.Sagas()[in.SagaType]; ok {
		for _, t := range m.MessageTypes() {
			if !slices.Contains(a.Events, t) {
				a.Others = append(a.Others, t)
			}
		}
	}
	return a
}

// batchQuery reads the filter of a batch action: the instance list's,
// its time range on updated_at included, so that the count and the end
// select what the list shows. A range on a store that cannot apply it is
// refused rather than ignored, which would count more than asked.
func (s *parts) batchQuery(v url.Values) (*readmodel.InstanceQuery, error) {
	q, err := instanceQuery(v)
	if err != nil {
		return nil, err
	}
	if q.Status == store.StatusFinished {
		return nil, errors.New("parameter status: a batch acts on active sagas, and status=finished selects none")
	}
	for _, p := range []string{"from", "to"} {
		if _, _, err := timeRange(url.Values{p: v[p]}, "Updated"); err != nil {
			return nil, fmt.Errorf("parameter %s: %w", p, err)
		}
	}
	if q.UpdatedFrom, q.UpdatedBefore, err = timeRange(v, "Updated"); err != nil {
		return nil, fmt.Errorf("parameters from and to: %w", err)
	}
	if s.caps.instances == nil && (!q.UpdatedFrom.IsZero() || !q.UpdatedBefore.IsZero()) {
		return nil, fmt.Errorf("parameters from and to: store %T cannot select by time: drop them", s.st)
	}
	return q, nil
}

func (s *api) apiSelectSagas(w http.ResponseWriter, r *http.Request) {
	q, err := s.batchQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	sel, err := inspect.SelectSagas(ctx, s.st, q)
	if err != nil {
		s.internalError(w, r, "select sagas", err)
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

func (s *api) apiEndSagas(w http.ResponseWriter, r *http.Request) {
	q, err := s.batchQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	actor, err := s.apiActor(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	var body EndSagas
	if err := json.NewDecoder(io.LimitReader(r.Body, s.maxBody)).Decode(&body); err != nil || body.Digest == "" {
		writeError(w, http.StatusBadRequest, `request body is not {"reason": "...", "digest": "<from GET /api/sagas/select>"}: %v`, err)
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	res, err := inspect.EndSagas(ctx, s.st, q, body.Digest, &inspect.End{Reason: body.Reason, Actor: actor, Now: time.Now()})
	switch {
	case errors.Is(err, inspect.ErrSetChanged):
		writeError(w, http.StatusConflict, "%v: count again with GET /api/sagas/select, then confirm", err)
	case errors.Is(err, inspect.ErrBadReason), errors.Is(err, inspect.ErrCapped):
		writeError(w, http.StatusBadRequest, "%v", err)
	case err != nil && res == nil:
		s.internalError(w, r, "end sagas", err)
	case err != nil:
		s.log.ErrorContext(ctx, "admin: end sagas", "ended", res.Done, "error", err)
		writeError(w, http.StatusServiceUnavailable, "%d sagas ended, then the store failed (see the server log): count again and confirm to end the rest", res.Done)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

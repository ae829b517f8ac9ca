package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

// RetryList is the answer of GET /api/sagas/{type}/{key}/retries: the
// saga's messages being retried, ordered by first failure, at most
// store.MaxRetriesOf.
type RetryList struct {
	Retries []store.Retry `json:"retries"`
}

// apiRetries lists the retry state of a saga's messages. The saga need
// not exist: a message that would start it may be the one failing.
func (a *api) apiRetries(w http.ResponseWriter, r *http.Request) {
	k, ok := a.sagaParam(w, r)
	if !ok {
		return
	}
	if a.caps.retries == nil {
		writeError(w, http.StatusNotImplemented, "store %T keeps no retry state", a.st)
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	rs, err := a.retriesOf(ctx, k)
	if err != nil {
		a.internalError(w, r, fmt.Sprintf("read the retries of saga %s/%s", k.SagaType, k.Key), err)
		return
	}
	if rs == nil {
		rs = []store.Retry{}
	}
	writeJSON(w, http.StatusOK, RetryList{Retries: rs})
}

func (a *api) apiRetryNow(w http.ResponseWriter, r *http.Request) {
	k, ok := a.sagaParam(w, r)
	if !ok {
		return
	}
	actor, err := a.apiActor(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	rt, err := a.findRetry(ctx, k, r.PathValue("id"))
	var env idem.Envelope
	if err == nil {
		env, err = a.retryNow(ctx, rt, actor)
	}
	if status, msg := retryStatus(err); status != 0 {
		if status == http.StatusServiceUnavailable {
			a.log.ErrorContext(ctx, "admin: retry now", "saga_type", k.SagaType, "error", err)
		}
		writeError(w, status, "%s", msg)
		return
	}
	writeJSON(w, http.StatusAccepted, Accepted{ID: env.ID, DedupID: env.DedupID(), Type: env.Type, Saga: k.SagaType, Key: k.Key})
}

// apiRetryFilter is retryFilter as the API reads it.
func apiRetryFilter(q url.Values) (*inspect.RetryFilter, error) { return retryFilter(q, false) }

func (a *api) apiSelectRetries(w http.ResponseWriter, r *http.Request) {
	f, err := apiRetryFilter(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	sel, err := inspect.SelectRetries(ctx, a.st, f)
	if errors.Is(err, inspect.ErrNoRetryState) {
		writeError(w, http.StatusNotImplemented, "store %T keeps no retry state", a.st)
		return
	} else if err != nil {
		a.internalError(w, r, "select retries", err)
		return
	}
	writeJSON(w, http.StatusOK, retrySelection{Count: len(sel.Retries), RetrySelection: sel})
}

func (a *api) apiRetryNowBatch(w http.ResponseWriter, r *http.Request) {
	var body RetryNowBatch
	f, actor, ok := batchRequest(a, w, r, apiRetryFilter, &body, `{"digest": "<from GET /api/retries/select>"}`)
	if !ok {
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	res, err := a.retryBatch(ctx, f, body.Digest, actor)
	switch {
	case errors.Is(err, inspect.ErrSetChanged):
		writeError(w, http.StatusConflict, "the messages the filter selects changed since they were counted: count again with GET /api/retries/select, then confirm")
	case errors.Is(err, inspect.ErrCapped):
		writeError(w, http.StatusBadRequest, "the filter selects more than %d messages: narrow it", inspect.MaxBatch)
	case errors.Is(err, inspect.ErrNoRetryState):
		writeError(w, http.StatusNotImplemented, "store %T keeps no retry state", a.st)
	case err != nil && res == nil:
		a.internalError(w, r, "select retries", err)
	case err != nil:
		a.log.ErrorContext(ctx, "admin: retry now", "published", res.Done, "error", err)
		writeError(w, http.StatusServiceUnavailable, "%d messages published again, then the store or the queue failed (see the server log): count again and confirm to retry the rest", res.Done)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

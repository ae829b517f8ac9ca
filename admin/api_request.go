package admin

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/idemhq/idem/store"
)

// The preambles of the API's handlers: each reads what its request names
// and answers 400 itself, naming what is wrong, when it is not acceptable.

// sagaParam reads the saga that the path's {type} and {key} name.
func (a *api) sagaParam(w http.ResponseWriter, r *http.Request) (store.Key, bool) {
	k, err := a.sagaKeyOf(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v: path-escape the key as it appears in GET /api/sagas", err)
		return store.Key{}, false
	}
	return k, true
}

// decodeBody decodes the request's JSON body, at most maxBody bytes, into
// v; shape says what the body should be.
func (a *api) decodeBody(r *http.Request, v any, shape string) error {
	if err := json.NewDecoder(io.LimitReader(r.Body, a.maxBody)).Decode(v); err != nil {
		return fmt.Errorf("request body is not %s: %w", shape, err)
	}
	return nil
}

// actionRequest reads the saga, the actor and the JSON body of an action
// on one saga.
func (a *api) actionRequest(w http.ResponseWriter, r *http.Request, body any, shape string) (store.Key, string, bool) {
	k, ok := a.sagaParam(w, r)
	if !ok {
		return store.Key{}, "", false
	}
	actor, err := a.apiActor(r)
	if err == nil {
		err = a.decodeBody(r, body, shape)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return store.Key{}, "", false
	}
	return k, actor, true
}

// digestBody is the body of a batch action bound to what was counted.
type digestBody interface{ digest() string }

func (b *EndSagas) digest() string      { return b.Digest }
func (b *RetryNowBatch) digest() string { return b.Digest }

// batchRequest reads the filter (by parse, from the query string), the
// actor and the JSON body of a batch action bound to a count, whose digest
// must be set.
func batchRequest[F any](a *api, w http.ResponseWriter, r *http.Request, parse func(url.Values) (F, error), body digestBody, shape string) (F, string, bool) {
	f, err := parse(r.URL.Query())
	var actor string
	if err == nil {
		actor, err = a.apiActor(r)
	}
	if err == nil {
		err = a.decodeBody(r, body, shape)
	}
	if err == nil && body.digest() == "" {
		err = fmt.Errorf("request body is not %s: no digest", shape)
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		var zero F
		return zero, "", false
	}
	return f, actor, true
}

// triageRequest reads the dead-letter filter of the query string
// (triageProblem checks it) and the page's limit.
func triageRequest(w http.ResponseWriter, r *http.Request) (url.Values, int, bool) {
	q := r.URL.Query()
	if p := triageProblem(q); p != "" {
		writeError(w, http.StatusBadRequest, "%s", p)
		return nil, 0, false
	}
	limit, ok := parseLimit(w, r)
	return q, limit, ok
}

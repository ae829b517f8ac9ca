package admin

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/idemhq/idem/store"
)

// defaultLimitKeys is how many counters of each limit GET /api/limits
// lists by default (?keys=), the most in flight first.
const defaultLimitKeys = 100

func (a *api) apiLimits(w http.ResponseWriter, r *http.Request) {
	keys, ok := limitKeysParam(w, r)
	if !ok {
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	out, err := a.listLimits(ctx, keys)
	if err != nil {
		a.limitError(w, r, "", err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// limitKeysParam reads ?keys=, the counters listed per limit: default
// 100, at most 1000.
func limitKeysParam(w http.ResponseWriter, r *http.Request) (int, bool) {
	v := r.URL.Query().Get("keys")
	if v == "" {
		return defaultLimitKeys, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > maxLimit {
		writeError(w, http.StatusBadRequest, "keys %.40q is not a number from 0 to %d: pass keys=100, say", v, maxLimit)
		return 0, false
	}
	return n, true
}

// apiSetLimit sets the override of {name}: POST /api/limits/{name} with a
// LimitChange.
func (a *api) apiSetLimit(w http.ResponseWriter, r *http.Request) {
	c, ok := a.limitRequest(w, r, false)
	if !ok {
		return
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, a.maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c.set); err != nil {
		writeError(w, http.StatusBadRequest, "request body is not %s: %v", limitBodyShape, err)
		return
	}
	if c.set.Concurrency == nil && c.set.Rate == nil && c.set.Burst == nil {
		writeError(w, http.StatusBadRequest, "request body sets nothing: give one or more of concurrency, rate and burst, as %s", limitBodyShape)
		return
	}
	a.changeLimitAnswer(w, r, c)
}

const limitBodyShape = `{"concurrency": 5, "rate": 20, "burst": 20}`

// apiResetLimit removes the override of {name}: the declared values are
// in force again.
func (a *api) apiResetLimit(w http.ResponseWriter, r *http.Request) {
	if c, ok := a.limitRequest(w, r, true); ok {
		a.changeLimitAnswer(w, r, c)
	}
}

// limitRequest reads the name of the path, the actor and ?undeclared= of
// a change.
func (a *api) limitRequest(w http.ResponseWriter, r *http.Request, reset bool) (*limitChange, bool) {
	c := &limitChange{name: r.PathValue("name"), reset: reset}
	var err error
	if c.actor, err = a.apiActor(r); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return nil, false
	}
	switch u := r.URL.Query().Get("undeclared"); u {
	case "", "false":
	case "true":
		c.undeclared = true
	default:
		writeError(w, http.StatusBadRequest, "undeclared %.40q: pass undeclared=true to set a limit no engine declares yet, or leave it out", u)
		return nil, false
	}
	return c, true
}

func (a *api) changeLimitAnswer(w http.ResponseWriter, r *http.Request, c *limitChange) {
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	out, err := a.changeLimit(ctx, c, defaultLimitKeys)
	if err != nil {
		a.limitError(w, r, c.name, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// limitError answers err of a read or a change of the limits: 501 for a
// store that keeps none, 404 for an unknown name, 400 for a bad name or
// value (naming the field), else as internalError.
func (a *api) limitError(w http.ResponseWriter, r *http.Request, name string, err error) {
	switch {
	case errors.Is(err, errNoLimits):
		writeError(w, http.StatusNotImplemented, "store %T keeps no flow-control limits", a.st)
	case errors.Is(err, errUnknownLimit):
		writeError(w, http.StatusNotFound, "no engine declares a limit %q and it has no override: check the name in GET /api/limits; to set a limit before the code that declares it runs, pass undeclared=true", name)
	case errors.Is(err, store.ErrRejected):
		writeError(w, http.StatusBadRequest, "%s", rejectedText(err))
	case name == "":
		a.internalError(w, r, "list limits", err)
	default:
		a.internalError(w, r, fmt.Sprintf("change limit %q", name), err)
	}
}

// rejectedText says which field of a limit change was refused, by its
// JSON name ("name" for the path's), and why.
func rejectedText(err error) string {
	var rej *store.RejectedError
	if errors.As(err, &rej) {
		return limitField(err) + ": " + rej.Err.Error()
	}
	return err.Error()
}

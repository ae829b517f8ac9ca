package admin

import (
	"errors"
	"net/http"
	"time"
)

func (a *api) apiReplicas(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	out, err := a.listReplicas(ctx, limit, time.Now())
	a.replicasAnswer(w, r, "list replicas", out, err)
}

func (a *api) apiRemoveReplicas(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	out, err := a.removeReplicas(ctx, time.Now())
	a.replicasAnswer(w, r, "remove replicas", out, err)
}

// replicasAnswer writes out, or the error of what: 501 when the store
// keeps no replica heartbeats.
func (a *api) replicasAnswer(w http.ResponseWriter, r *http.Request, what string, out any, err error) {
	switch {
	case errors.Is(err, errNoReplicas):
		writeError(w, http.StatusNotImplemented, "store %T keeps no replica heartbeats", a.st)
	case err != nil:
		a.internalError(w, r, what, err)
	default:
		writeJSON(w, http.StatusOK, out)
	}
}

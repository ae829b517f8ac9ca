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
	if errors.Is(err, errNoReplicas) {
		writeError(w, http.StatusNotImplemented, "store %T keeps no replica heartbeats", a.st)
		return
	}
	if err != nil {
		a.internalError(w, r, "list replicas", err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) apiRemoveReplicas(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	out, err := a.removeReplicas(ctx, time.Now())
	if errors.Is(err, errNoReplicas) {
		writeError(w, http.StatusNotImplemented, "store %T keeps no replica heartbeats", a.st)
		return
	}
	if err != nil {
		a.internalError(w, r, "remove replicas", err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

package admin

import (
	"errors"
	"net/http"
	"time"
)

func (s *api) apiReplicas(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	out, err := s.listReplicas(ctx, limit, time.Now())
	if errors.Is(err, errNoReplicas) {
		writeError(w, http.StatusNotImplemented, "store %T keeps no replica heartbeats", s.st)
		return
	}
	if err != nil {
		s.internalError(w, r, "list replicas", err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *api) apiRemoveReplicas(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	out, err := s.removeReplicas(ctx, time.Now())
	if errors.Is(err, errNoReplicas) {
		writeError(w, http.StatusNotImplemented, "store %T keeps no replica heartbeats", s.st)
		return
	}
	if err != nil {
		s.internalError(w, r, "remove replicas", err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

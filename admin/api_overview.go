package admin

import "net/http"

func (s *api) apiOverview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	o, err := s.overview(ctx)
	if err != nil {
		s.internalError(w, r, "overview", err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

func (s *api) apiSagaTypes(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	ts, err := s.sagaTypes(ctx)
	if err != nil {
		s.internalError(w, r, "saga types", err)
		return
	}
	writeJSON(w, http.StatusOK, ts)
}

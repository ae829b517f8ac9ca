package admin

import "net/http"

func (a *api) apiOverview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	o, err := a.overview(ctx)
	if err != nil {
		a.internalError(w, r, "overview", err)
		return
	}
	writeJSON(w, http.StatusOK, o)
}

func (a *api) apiSagaTypes(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	ts, err := a.sagaTypes(ctx)
	if err != nil {
		a.internalError(w, r, "saga types", err)
		return
	}
	writeJSON(w, http.StatusOK, ts)
}

package admin

import (
	"errors"
	"net/http"
	"time"
)

// apiDeploys answers GET /api/deploys: 501 when the store neither counts
// its live sagas nor keeps a definition registry.
func (a *api) apiDeploys(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	out, err := a.readDeploys(ctx, time.Now())
	switch {
	case errors.Is(err, errNoDeploys):
		writeError(w, http.StatusNotImplemented, "store %T neither counts its live sagas (readmodel.Censuser) nor keeps the definitions engines ran (store.DefinitionStore)", a.st)
	case err != nil:
		a.internalError(w, r, "read deploys", err)
	default:
		writeJSON(w, http.StatusOK, out)
	}
}

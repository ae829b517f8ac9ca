package admin

import (
	"errors"
	"net/http"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

func (a *api) apiTimers(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	now := time.Now()
	f := timerFilter(r.URL.Query(), now)
	f.Limit = limit
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	ts, next, err := inspect.Timers(ctx, a.st, f)
	if errors.Is(err, inspect.ErrBadCursor) {
		writeError(w, http.StatusBadRequest, "after: %v", err)
		return
	}
	if err != nil {
		a.internalError(w, r, "list timers", err)
		return
	}
	out := TimerList{Timers: make([]Timer, 0, len(ts)), Next: next}
	for i := range ts {
		out.Timers = append(out.Timers, toTimer(&ts[i], now))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) apiCancelTimer(w http.ResponseWriter, r *http.Request) {
	k, ok := timerKey(w, r)
	if !ok {
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	if err := inspect.CancelTimer(ctx, a.st, k); errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no timer %s of saga %s/%q: list them with GET /api/timers?type=%s", k.Name, k.SagaType, k.Key, k.SagaType)
		return
	} else if err != nil {
		a.internalError(w, r, "cancel timer", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"cancelled": k.Name})
}

func (a *api) apiRescheduleTimer(w http.ResponseWriter, r *http.Request) {
	k, ok := timerKey(w, r)
	if !ok {
		return
	}
	var body Reschedule
	if err := a.decodeBody(r, &body, `{"due_at": "2026-01-02T15:04:05Z"} or {"in": "10m"}`); err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	due, err := dueTime(body, time.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	t, err := inspect.RescheduleTimer(ctx, a.st, k, due)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no timer %s of saga %s/%q: list them with GET /api/timers?type=%s", k.Name, k.SagaType, k.Key, k.SagaType)
		return
	}
	if err != nil {
		a.internalError(w, r, "reschedule timer", err)
		return
	}
	writeJSON(w, http.StatusOK, toTimer(t, time.Now()))
}

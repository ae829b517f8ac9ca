package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

func (a *api) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	dls, err := a.st.ListDeadLetters(ctx, &store.ListParams{SagaType: q.Get("type"), After: q.Get("after"), Limit: limit})
	if err != nil {
		a.internalError(w, r, "list dead letters", err)
		return
	}
	out := DeadLetterList{DeadLetters: make([]DeadLetter, 0, len(dls))}
	for i := range dls {
		out.DeadLetters = append(out.DeadLetters, inspect.DeadLetterOf(&dls[i]))
	}
	if len(dls) == limit {
		out.Next = dls[len(dls)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) getDeadLetter(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	d, err := a.st.GetDeadLetter(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no dead letter with ID %q: list them with GET /api/dead-letters", id)
		return
	}
	if err != nil {
		a.internalError(w, r, "get dead letter", err)
		return
	}
	writeJSON(w, http.StatusOK, inspect.DeadLetterOf(d))
}

func (a *api) replayDeadLetter(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	replay := a.e.ReplayDeadLetter
	if f := r.URL.Query().Get("force"); f == "true" || f == "1" {
		replay = a.e.ForceReplayDeadLetter
	}
	err := replay(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no dead letter with ID %q: list them with GET /api/dead-letters", id)
		return
	}
	if msg := replayRefused(err); msg != "" {
		writeError(w, http.StatusConflict, "dead letter %q: %s", id, msg)
		return
	}
	if err != nil {
		a.internalError(w, r, "replay dead letter", err)
		return
	}
	writeJSON(w, http.StatusAccepted, requeued(id))
}

func (a *api) deleteDeadLetter(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	n, err := a.st.DeleteDeadLetters(ctx, []string{id})
	if err != nil {
		a.internalError(w, r, "delete dead letter", err)
		return
	}
	if n == 0 {
		writeError(w, http.StatusNotFound, "no dead letter with ID %q: list them with GET /api/dead-letters", id)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": id})
}

// queryDeadLetters serves GET /api/dead-letters, with the reason,
// message_type and key filters when given.
func (a *api) queryDeadLetters(w http.ResponseWriter, r *http.Request) {
	q, limit, ok := triageRequest(w, r)
	if !ok {
		return
	}
	if q.Get("reason") == "" && q.Get("message_type") == "" && q.Get("key") == "" && q.Get("state") == "" &&
		q.Get("fingerprint") == "" && q.Get("archived") == "" && q.Get("archived_before") == "" {
		a.listDeadLetters(w, r)
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	dls, next, err := inspect.DeadLetters(ctx, a.st, deadLetterFilter(q), q.Get("after"), limit)
	if err != nil {
		a.internalError(w, r, "list dead letters", err)
		return
	}
	out := DeadLetterList{DeadLetters: make([]DeadLetter, 0, len(dls)), Next: next}
	for i := range dls {
		out.DeadLetters = append(out.DeadLetters, inspect.DeadLetterOf(&dls[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

func (a *api) apiDeadLetterCounts(w http.ResponseWriter, r *http.Request) {
	if p := triageProblem(r.URL.Query()); p != "" {
		writeError(w, http.StatusBadRequest, "%s", p)
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	c, err := a.deadLetterCounts(ctx, deadLetterFilter(r.URL.Query()))
	if err != nil {
		a.internalError(w, r, "count dead letters", err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (a *api) apiBulkDeadLetters(replay bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		dry := q.Get("dry_run") == "true" || q.Get("dry_run") == "1"
		ctx, cancel := context.WithTimeout(r.Context(), 10*a.timeout)
		defer cancel()
		res, err := a.bulkDeadLetters(ctx, deadLetterFilter(q), replay, dry)
		if err != nil && (res == nil || errors.Is(err, readmodel.ErrBadMark)) {
			a.internalError(w, r, "bulk dead letters", err)
			return
		}
		if err != nil {
			a.bulkFailed(w, r, res, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// bulkFailed logs err and answers 500 (503 when the store timed out) with
// what the bulk action did before it stopped; the error's text, which may
// name hosts or paths, stays in the log.
func (a *api) bulkFailed(w http.ResponseWriter, r *http.Request, res *BulkResult, err error) {
	a.log.ErrorContext(r.Context(), "admin: bulk dead letters", "error", err, "method", r.Method, "path", r.URL.Path, "done", res.Done)
	status := http.StatusInternalServerError
	res.Error = fmt.Sprintf("stopped after %d done: see the server log for the cause, then retry", res.Done)
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusServiceUnavailable
		res.Error = fmt.Sprintf("stopped after %d done: the store did not answer in time: retry later; see the server log", res.Done)
	}
	writeJSON(w, status, res)
}

func (a *api) apiDeadLetterGroups(w http.ResponseWriter, r *http.Request) {
	q, limit, ok := triageRequest(w, r)
	if !ok {
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	gs, err := inspect.Groups(ctx, a.st, deadLetterFilter(q), limit)
	if errors.Is(err, inspect.ErrUnsupported) {
		writeError(w, http.StatusNotImplemented, "this store does not group dead letters (readmodel.DeadLetterGrouper), or message_type was given and the store cannot select by it (readmodel.DeadLetterTypeQuerier)")
		return
	}
	if err != nil {
		a.internalError(w, r, "group dead letters", err)
		return
	}
	out := DeadLetterGroups{Groups: make([]DeadLetterGroup, 0, len(gs))}
	for i := range gs {
		out.Groups = append(out.Groups, groupOf(&gs[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// apiTriage serves POST /api/dead-letters/archive and /restore: the dead
// letters named by id (repeated), else every one the filters select as of
// as_of (restore selects among the archived), with dry_run. At most
// maxSelected IDs.
func (a *api) apiTriage(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		if p := triageProblem(q); p != "" {
			writeError(w, http.StatusBadRequest, "%s", p)
			return
		}
		if len(q["id"]) > maxSelected {
			writeError(w, http.StatusBadRequest, "%d IDs: at most %d a request (as the console's selection); act on a filter, bound with as_of, instead", len(q["id"]), maxSelected)
			return
		}
		dry := q.Get("dry_run") == "true" || q.Get("dry_run") == "1"
		ctx, cancel := context.WithTimeout(r.Context(), 10*a.timeout)
		defer cancel()
		res, err := a.bulkTriage(ctx, &triageAction{Action: action, Filter: deadLetterFilter(q), IDs: q["id"], DryRun: dry})
		if errors.Is(err, inspect.ErrUnsupported) {
			writeError(w, http.StatusNotImplemented, "this store does not archive dead letters (readmodel.DeadLetterArchiver)")
			return
		}
		if err != nil && (res == nil || errors.Is(err, readmodel.ErrBadMark)) {
			a.internalError(w, r, action+" dead letters", err)
			return
		}
		if err != nil {
			a.bulkFailed(w, r, res, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

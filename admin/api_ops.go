package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// writable refuses h in read-only mode.
func (s *parts) writable(h http.Handler) http.Handler {
	if !s.readOnly {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "this admin server is read-only (admin.Config.ReadOnly, idem serve --read-only): change nothing here, or restart it without read-only")
	})
}

// instanceQuery reads the console's and the API's instance filters.
func instanceQuery(q url.Values) (*readmodel.InstanceQuery, error) {
	p := &readmodel.InstanceQuery{SagaType: q.Get("type"), State: q.Get("state"), Status: q.Get("status"), KeyPrefix: canon.Prefix(q.Get("prefix"))}
	p.Stuck = q.Get("stuck") == "true" || q.Get("stuck") == "1" || q.Get("stuck") == "on"
	if p.Status != "" && p.Status != store.StatusActive && p.Status != store.StatusFinished {
		return nil, fmt.Errorf("status %q is neither active nor finished", p.Status)
	}
	attrs, err := inspect.ParseAttributes(attrFilters(q))
	if err != nil {
		return nil, err
	}
	p.Attributes = attrs
	if a := q.Get("after"); a != "" {
		c, err := decodeCursor(a)
		if err != nil {
			return nil, fmt.Errorf("after: %w", err)
		}
		p.After = c
	}
	return p, nil
}

// attrFilters returns the non-empty attr parameters (name=value each; the
// console's form sends an empty one for its blank field).
func attrFilters(q url.Values) []string {
	var out []string
	for _, a := range q["attr"] {
		if a != "" {
			out = append(out, a)
		}
	}
	return out
}

// encodeCursor makes the opaque "next" of an instance page.
func encodeCursor(in *store.Instance) string { return inspect.InstanceCursor(in) }

func decodeCursor(s string) (*readmodel.InstanceCursor, error) { return inspect.ParseInstanceCursor(s) }

// querySagas serves GET /api/sagas: the plain listing, or with status,
// prefix, stuck or attr the filtered query whose cursor is opaque.
func (s *api) querySagas(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if q.Get("status") == "" && q.Get("prefix") == "" && q.Get("stuck") == "" && len(attrFilters(q)) == 0 {
		s.listSagas(w, r)
		return
	}
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	p, err := instanceQuery(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	p.Limit = limit
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	ins, err := inspect.Instances(ctx, s.st, p)
	if errors.Is(err, inspect.ErrUnsupported) {
		writeError(w, http.StatusNotImplemented, "%v: drop stuck=, or use a store that implements it", err)
		return
	}
	if err != nil {
		s.internalError(w, r, "query sagas", err)
		return
	}
	out := SagaList{Sagas: make([]Instance, 0, len(ins))}
	for _, in := range ins {
		out.Sagas = append(out.Sagas, toInstance(in))
	}
	if len(ins) == limit {
		out.Next = encodeCursor(ins[len(ins)-1])
	}
	writeJSON(w, http.StatusOK, out)
}

// deadLetterFilter reads type (saga type), reason, message_type, key and
// as_of (the mark of a count).
func deadLetterFilter(q url.Values) *inspect.DeadLetterFilter {
	return triageFilter(q, &inspect.DeadLetterFilter{SagaType: q.Get("type"), Reason: q.Get("reason"), MessageType: q.Get("message_type"), Key: canon.Lookup(q.Get("key")), AsOf: q.Get("as_of"), State: store.DeadLetterState(q.Get("state"))})
}

// queryDeadLetters serves GET /api/dead-letters, with the reason,
// message_type and key filters when given.
func (s *api) queryDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if p := triageProblem(q); p != "" {
		writeError(w, http.StatusBadRequest, "%s", p)
		return
	}
	if q.Get("reason") == "" && q.Get("message_type") == "" && q.Get("key") == "" && q.Get("state") == "" &&
		q.Get("fingerprint") == "" && q.Get("archived") == "" && q.Get("archived_before") == "" {
		s.listDeadLetters(w, r)
		return
	}
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	dls, next, err := inspect.DeadLetters(ctx, s.st, deadLetterFilter(q), q.Get("after"), limit)
	if err != nil {
		s.internalError(w, r, "list dead letters", err)
		return
	}
	out := DeadLetterList{DeadLetters: make([]DeadLetter, 0, len(dls)), Next: next}
	for i := range dls {
		out.DeadLetters = append(out.DeadLetters, inspect.DeadLetterOf(&dls[i]))
	}
	writeJSON(w, http.StatusOK, out)
}

// DeadLetterCounts is the answer of GET /api/dead-letters/counts.
type DeadLetterCounts struct {
	Total    int                   `json:"total"`
	ByReason []inspect.ReasonCount `json:"by_reason"`
	// Exact is false when more dead letters exist than were counted.
	Exact bool `json:"exact"`
	// AsOf is the mark of the count: pass it as as_of to a bulk replay or
	// purge so that it acts on exactly the dead letters counted (absent
	// when the store cannot bind one).
	AsOf string `json:"as_of,omitempty"`
}

func (s *api) apiDeadLetterCounts(w http.ResponseWriter, r *http.Request) {
	if p := triageProblem(r.URL.Query()); p != "" {
		writeError(w, http.StatusBadRequest, "%s", p)
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	c, err := s.deadLetterCounts(ctx, deadLetterFilter(r.URL.Query()))
	if err != nil {
		s.internalError(w, r, "count dead letters", err)
		return
	}
	writeJSON(w, http.StatusOK, c)
}

func (s *parts) deadLetterCounts(ctx context.Context, f *inspect.DeadLetterFilter) (*DeadLetterCounts, error) {
	c, err := inspect.CountByReason(ctx, s.st, f)
	if err != nil {
		return nil, err
	}
	if c.ByReason == nil {
		c.ByReason = []inspect.ReasonCount{}
	}
	return &DeadLetterCounts{Total: c.Total, ByReason: c.ByReason, Exact: c.Exact, AsOf: c.AsOf}, nil
}

// BulkResult is the answer of POST /api/dead-letters/replay and /purge.
type BulkResult struct {
	// Matched is how many dead letters the filters selected as of AsOf.
	Matched int `json:"matched"`
	// Done is how many were re-queued or purged: 0 with dry_run. A
	// re-queued dead letter's outcome shows later in its replays.
	Done   int  `json:"done"`
	DryRun bool `json:"dry_run"`
	// AsOf is the mark the action was bound to: the as_of given, else one
	// taken when the request began. Dead letters recorded, or failed
	// again, after it are left alone when their page is read: a purge
	// re-checks it as it deletes, but a replay does not, so a dead letter
	// of the page being replayed that fails again before its turn is
	// replayed anyway.
	AsOf string `json:"as_of,omitempty"`
	// Skipped is how many of the dead letters matched were gone by their
	// turn (purged, or replayed by a store without replay history, since
	// the page that held them was read): neither done nor failed.
	Skipped int `json:"skipped,omitempty"`
	// Message says what was done and where to see the outcome.
	Message string `json:"message"`
	// Error, set with a 500 or 503, says why the action stopped before
	// the end; Done and Skipped count what it did until then.
	Error string `json:"error,omitempty"`
}

func (s *api) apiBulkDeadLetters(replay bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		dry := q.Get("dry_run") == "true" || q.Get("dry_run") == "1"
		ctx, cancel := context.WithTimeout(r.Context(), 10*s.timeout)
		defer cancel()
		res, err := s.bulkDeadLetters(ctx, deadLetterFilter(q), replay, dry)
		if err != nil && (res == nil || errors.Is(err, readmodel.ErrBadMark)) {
			s.internalError(w, r, "bulk dead letters", err)
			return
		}
		if err != nil {
			s.bulkFailed(w, r, res, err)
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
}

// bulkFailed logs err and answers 500 (503 when the store timed out) with
// what the bulk action did before it stopped; the error's text, which may
// name hosts or paths, stays in the log.
func (s *api) bulkFailed(w http.ResponseWriter, r *http.Request, res *BulkResult, err error) {
	s.log.ErrorContext(r.Context(), "admin: bulk dead letters", "error", err, "method", r.Method, "path", r.URL.Path, "done", res.Done)
	status := http.StatusInternalServerError
	res.Error = fmt.Sprintf("stopped after %d done: see the server log for the cause, then retry", res.Done)
	if errors.Is(err, context.DeadlineExceeded) {
		status = http.StatusServiceUnavailable
		res.Error = fmt.Sprintf("stopped after %d done: the store did not answer in time: retry later; see the server log", res.Done)
	}
	writeJSON(w, status, res)
}

// bulkDeadLetters replays (or purges) every dead letter f selects as of
// f.AsOf, or as of now when f has no mark: never one recorded after the
// count the caller confirmed. On error it returns, with the error, what it
// did until then (nil when it did not start).
func (s *parts) bulkDeadLetters(ctx context.Context, f *inspect.DeadLetterFilter, replay, dry bool) (*BulkResult, error) {
	res := &BulkResult{DryRun: dry}
	if f.AsOf == "" {
		c, err := inspect.CountByReason(ctx, s.st, f)
		if err != nil {
			return nil, err
		}
		f.AsOf = c.AsOf
	}
	res.AsOf = f.AsOf
	err := inspect.EachDeadLetter(ctx, s.st, f, func(ds []store.DeadLetter) error {
		res.Matched += len(ds)
		if dry {
			return nil
		}
		if !replay {
			n, err := inspect.DeleteDeadLetters(ctx, s.st, f, ds)
			res.Done += n
			return err
		}
		for i := range ds {
			err := s.e.ReplayDeadLetter(ctx, ds[i].ID)
			switch {
			case errors.Is(err, store.ErrNotFound) || (err != nil && replayRefused(err) != ""):
				res.Skipped++ // gone, or its replay resolved or started, since its page was read
			case err != nil:
				return fmt.Errorf("replay dead letter %s: %w", ds[i].ID, err)
			default:
				res.Done++
			}
		}
		return nil
	})
	res.Message = bulkMessage(res, replay)
	if res.Skipped > 0 {
		res.Message += fmt.Sprintf(" (%d skipped: gone since they were listed)", res.Skipped)
	}
	return res, err
}

// bulkMessage says what a bulk action did, and for a replay that its
// outcome is not known yet.
func bulkMessage(res *BulkResult, replay bool) string {
	switch {
	case res.DryRun && replay:
		return fmt.Sprintf("%d dead letter(s) would be re-queued (dry run: nothing changed)", res.Matched)
	case res.DryRun:
		return fmt.Sprintf("%d dead letter(s) would be purged (dry run: nothing changed)", res.Matched)
	case replay:
		return fmt.Sprintf("%d dead letter(s) re-queued: each replay is pending until an engine consumes it; "+
			"see each dead letter's replays (GET /api/dead-letters/{id}, or the console) for whether it succeeded or failed again", res.Done)
	}
	return fmt.Sprintf("%d dead letter(s) purged", res.Done)
}

// Timer is a timer as the API returns it.
type Timer struct {
	SagaType string    `json:"saga_type"`
	Key      string    `json:"key"`
	Name     string    `json:"name"`
	DueAt    time.Time `json:"due_at"`
	Overdue  bool      `json:"overdue"`
	Envelope Envelope  `json:"envelope"`
}

// TimerList is the answer of GET /api/timers.
type TimerList struct {
	Timers []Timer `json:"timers"`
	Next   string  `json:"next,omitempty"`
}

func toTimer(t *store.Timer, now time.Time) Timer {
	return Timer{SagaType: t.SagaType, Key: t.Key, Name: t.Name, DueAt: t.DueAt.UTC(), Overdue: t.DueAt.Before(now), Envelope: inspect.EnvelopeOf(&t.Envelope)}
}

func timerFilter(q url.Values, now time.Time) *inspect.TimerFilter {
	f := &inspect.TimerFilter{SagaType: q.Get("type"), Key: canon.Lookup(q.Get("key")), After: q.Get("after")}
	if q.Get("overdue") == "true" || q.Get("overdue") == "1" || q.Get("overdue") == "on" {
		f.DueBefore = now
	}
	return f
}

func (s *api) apiTimers(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	now := time.Now()
	f := timerFilter(r.URL.Query(), now)
	f.Limit = limit
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	ts, next, err := inspect.Timers(ctx, s.st, f)
	if errors.Is(err, inspect.ErrBadCursor) {
		writeError(w, http.StatusBadRequest, "after: %v", err)
		return
	}
	if err != nil {
		s.internalError(w, r, "list timers", err)
		return
	}
	out := TimerList{Timers: make([]Timer, 0, len(ts)), Next: next}
	for i := range ts {
		out.Timers = append(out.Timers, toTimer(&ts[i], now))
	}
	writeJSON(w, http.StatusOK, out)
}

// timerKey reads {type}/{key}/{name}; it answers 400 itself when the key
// is not valid.
func timerKey(w http.ResponseWriter, r *http.Request) (store.TimerKey, bool) {
	key, err := canonKey(r.PathValue("key"), maxFieldLen)
	if err != nil {
		writeError(w, http.StatusBadRequest, "saga key %q is not a valid key (%v): path-escape the key as GET /api/timers returns it", r.PathValue("key"), err)
		return store.TimerKey{}, false
	}
	return store.TimerKey{SagaType: r.PathValue("type"), Key: key, Name: r.PathValue("name")}, true
}

func (s *api) apiCancelTimer(w http.ResponseWriter, r *http.Request) {
	k, ok := timerKey(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	if err := inspect.CancelTimer(ctx, s.st, k); errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no timer %s of saga %s/%q: list them with GET /api/timers?type=%s", k.Name, k.SagaType, k.Key, k.SagaType)
		return
	} else if err != nil {
		s.internalError(w, r, "cancel timer", err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"cancelled": k.Name})
}

// Reschedule is the body of POST /api/timers/{type}/{key}/{name}/reschedule:
// DueAt, or In from now (a Go duration, "0s" for at once).
type Reschedule struct {
	DueAt time.Time `json:"due_at,omitzero"`
	In    string    `json:"in,omitempty"`
}

func (s *api) apiRescheduleTimer(w http.ResponseWriter, r *http.Request) {
	k, ok := timerKey(w, r)
	if !ok {
		return
	}
	var body Reschedule
	if err := json.NewDecoder(io.LimitReader(r.Body, s.maxBody)).Decode(&body); err != nil {
		writeError(w, http.StatusBadRequest, `request body is not {"due_at": "2026-01-02T15:04:05Z"} or {"in": "10m"}: %v`, err)
		return
	}
	due, err := dueTime(body, time.Now())
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	t, err := inspect.RescheduleTimer(ctx, s.st, k, due)
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no timer %s of saga %s/%q: list them with GET /api/timers?type=%s", k.Name, k.SagaType, k.Key, k.SagaType)
		return
	}
	if err != nil {
		s.internalError(w, r, "reschedule timer", err)
		return
	}
	writeJSON(w, http.StatusOK, toTimer(t, time.Now()))
}

// dueTime resolves a Reschedule against now.
func dueTime(b Reschedule, now time.Time) (time.Time, error) {
	switch {
	case !b.DueAt.IsZero() && b.In != "":
		return time.Time{}, errors.New("give due_at or in, not both")
	case !b.DueAt.IsZero():
		return b.DueAt, nil
	case b.In != "":
		d, err := time.ParseDuration(b.In)
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf("in %q is not a duration like 10m or 0s", b.In)
		}
		return now.Add(d), nil
	}
	return time.Time{}, errors.New(`give due_at (RFC 3339) or in (a duration like 10m)`)
}

// atoi parses a non-negative count; 0 when absent or malformed.
func atoi(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

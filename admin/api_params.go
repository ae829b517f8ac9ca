package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

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

// deadLetterFilter reads type (saga type), reason, message_type, key and
// as_of (the mark of a count).
func deadLetterFilter(q url.Values) *inspect.DeadLetterFilter {
	return triageFilter(q, &inspect.DeadLetterFilter{SagaType: q.Get("type"), Reason: q.Get("reason"), MessageType: q.Get("message_type"), Key: canon.Lookup(q.Get("key")), AsOf: q.Get("as_of"), State: store.DeadLetterState(q.Get("state"))})
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

// Reschedule is the body of POST /api/timers/{type}/{key}/{name}/reschedule:
// DueAt, or In from now (a Go duration, "0s" for at once).
type Reschedule struct {
	DueAt time.Time `json:"due_at,omitzero"`
	In    string    `json:"in,omitempty"`
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

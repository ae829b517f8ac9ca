package admin

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// Schedule is a recurring schedule as the API shows it.
type Schedule struct {
	Name     string    `json:"name"`
	Spec     string    `json:"spec"`
	Missed   string    `json:"missed"`
	Grace    string    `json:"grace,omitempty"`
	Paused   bool      `json:"paused"`
	NextDue  time.Time `json:"next_due"`
	LastTick time.Time `json:"last_tick,omitzero"`
	Message  string    `json:"message_type"`
}

// ScheduleList is a page of GET /api/schedules.
type ScheduleList struct {
	Schedules []Schedule `json:"schedules"`
	// Next is the after= value of the next page; empty on the last page.
	Next string `json:"next,omitempty"`
}

// FiredTick is the answer of POST /api/schedules/{name}/fire.
type FiredTick struct {
	Name string `json:"name"`
	// Tick is the tick fired: the schedule's next one, fired early.
	Tick time.Time `json:"tick"`
	// MessageID is the tick's message ID (idem.TickID), the same a replica
	// firing it on time would have used.
	MessageID string    `json:"message_id"`
	NextDue   time.Time `json:"next_due"`
}

func (a *api) apiFireSchedule(w http.ResponseWriter, r *http.Request) {
	name, ok := scheduleName(w, r)
	if !ok {
		return
	}
	if _, ok := a.scheduler(w); !ok {
		return
	}
	var tick time.Time
	if t := r.URL.Query().Get("tick"); t != "" {
		var err error
		if tick, err = time.Parse(time.RFC3339Nano, t); err != nil {
			writeError(w, http.StatusBadRequest, "tick %.40q is not an RFC 3339 time: pass the next_due GET /api/schedules shows, or no tick to fire whatever tick is next", t)
			return
		}
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	f, err := a.e.FireSchedule(ctx, name, tick)
	if status, msg := fireError(name, err); status == http.StatusInternalServerError {
		a.internalError(w, r, "fire schedule", err)
		return
	} else if status != 0 {
		writeError(w, status, "%s", msg)
		return
	}
	writeJSON(w, http.StatusAccepted, FiredTick{Name: name, Tick: f.Tick.UTC(), MessageID: f.MessageID, NextDue: f.NextDue.UTC()})
}

// fireError maps FireSchedule's error to a status and a sentence; 0 for
// none.
func fireError(name string, err error) (int, string) {
	switch {
	case err == nil:
		return 0, ""
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, fmt.Sprintf("no schedule %q: list them with GET /api/schedules", name)
	case errors.Is(err, store.ErrConflict):
		return http.StatusConflict, fmt.Sprintf("schedule %q fired that tick meanwhile, or changed: read it again (GET /api/schedules) and fire the tick it shows", name)
	}
	return http.StatusInternalServerError, ""
}

// scheduler returns the store's schedules, or answers 501 itself.
func (a *api) scheduler(w http.ResponseWriter) (store.Scheduler, bool) {
	sc := a.caps.schedules
	if sc == nil {
		writeError(w, http.StatusNotImplemented, "store %T keeps no schedules", a.st)
	}
	return sc, sc != nil
}

func (a *api) apiSchedules(w http.ResponseWriter, r *http.Request) {
	limit, ok := parseLimit(w, r)
	if !ok {
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	out, err := a.listSchedules(ctx, r.URL.Query().Get("after"), limit)
	if errors.Is(err, errNoSchedules) {
		writeError(w, http.StatusNotImplemented, "store %T keeps no schedules", a.st)
		return
	}
	if err != nil {
		a.internalError(w, r, "list schedules", err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// errNoSchedules is the error of a store that is no store.Scheduler.
var errNoSchedules = errors.New("the store keeps no schedules")

// badScheduleName is the error of a name idem.ValidateScheduleName refuses.
type badScheduleName struct{ err error }

func (e badScheduleName) Error() string { return e.err.Error() }
func (e badScheduleName) Unwrap() error { return e.err }

func toSchedule(x *store.Schedule) Schedule {
	out := Schedule{Name: x.Name, Spec: x.Spec, Missed: x.Missed, Paused: x.Paused, NextDue: x.NextDue.UTC(), LastTick: x.LastTick.UTC(), Message: x.Envelope.Type}
	if x.Missed == store.MissedSkip {
		out.Grace = x.Grace.String()
	}
	return out
}

// scheduleName reads {name}; it answers 400 itself when it cannot name a
// schedule.
func scheduleName(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.PathValue("name")
	if err := idem.ValidateScheduleName(name); err != nil {
		writeError(w, http.StatusBadRequest, "%v: path-escape the name as GET /api/schedules returns it", err)
		return "", false
	}
	return name, true
}

func (a *api) apiPauseSchedule(paused bool) http.HandlerFunc {
	verb := map[bool]string{true: "paused", false: "resumed"}[paused]
	return func(w http.ResponseWriter, r *http.Request) {
		name := r.PathValue("name")
		ctx, cancel := a.storeCtx(r)
		defer cancel()
		if err := a.pauseSchedule(ctx, name, paused); err != nil {
			a.scheduleError(w, r, name, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{verb: name})
	}
}

func (a *api) apiDeleteSchedule(w http.ResponseWriter, r *http.Request) {
	name, ok := scheduleName(w, r)
	if !ok {
		return
	}
	sc, ok := a.scheduler(w)
	if !ok {
		return
	}
	ctx, cancel := a.storeCtx(r)
	defer cancel()
	if err := sc.DeleteSchedule(ctx, name); err != nil {
		a.scheduleError(w, r, name, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": name})
}

func (a *api) scheduleError(w http.ResponseWriter, r *http.Request, name string, err error) {
	var bad badScheduleName
	switch {
	case errors.As(err, &bad):
		writeError(w, http.StatusBadRequest, "%v: path-escape the name as GET /api/schedules returns it", bad.err)
		return
	case errors.Is(err, errNoSchedules):
		writeError(w, http.StatusNotImplemented, "store %T keeps no schedules", a.st)
		return
	}
	if errors.Is(err, store.ErrNotFound) {
		writeError(w, http.StatusNotFound, "no schedule %q: list them with GET /api/schedules", name)
		return
	}
	a.internalError(w, r, fmt.Sprintf("change schedule %q", name), err)
}

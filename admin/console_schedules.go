package admin

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// scheduleRow is a schedule as the console lists it.
type scheduleRow struct {
	Schedule
	// Valid is false when the stored name is one idem.ValidateScheduleName
	// refuses (a row written by other means): the console offers no action
	// on it, as the API would refuse it.
	Valid bool
}

// schedulesView is the schedules page, with the question asked before a
// pause or a resume when Confirm is set.
type schedulesView struct {
	Rows    []scheduleRow
	Next    string
	After   string
	Problem string
	Confirm *scheduleRow
	// Action is "pause", "resume" or "fire": what Confirm asks.
	Action string
	Flash  string
	Now    time.Time
}

// scheduleFlash turns ?done= into a fixed sentence: the query cannot
// inject text of its own.
func scheduleFlash(done string) string {
	return map[string]string{"paused": "1 schedule paused.", "resumed": "1 schedule resumed.", "fired": "1 schedule fired: its next tick was sent now, and it is due again at the tick after."}[done]
}

func (c *console) pageSchedules(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := &schedulesView{After: q.Get("after"), Flash: scheduleFlash(q.Get("done")), Now: time.Now()}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	if a := q.Get("confirm"); a == "pause" || a == "resume" || a == "fire" {
		v.Action = a
		if !c.askSchedule(ctx, w, r, v, q.Get("name")) {
			return
		}
	}
	list, err := c.listSchedules(ctx, v.After, consolePage)
	if errors.Is(err, errNoSchedules) {
		v.Problem = "This store keeps no schedules."
		c.render(w, r, http.StatusOK, "schedules", "Schedules", v)
		return
	}
	if err != nil {
		c.storeFailed(w, r, "list schedules", err)
		return
	}
	v.Next = list.Next
	for _, x := range list.Schedules {
		v.Rows = append(v.Rows, scheduleRow{Schedule: x, Valid: idem.ValidateScheduleName(x.Name) == nil})
	}
	c.render(w, r, http.StatusOK, "schedules", "Schedules", v)
}

// askSchedule sets v.Confirm to the schedule the question is about; it
// sends an error page and returns false when the question cannot be asked
// (read-only, a bad name, no such schedule), as the action would refuse.
func (c *console) askSchedule(ctx context.Context, w http.ResponseWriter, r *http.Request, v *schedulesView, name string) bool {
	if c.readOnly {
		c.consoleError(w, r, http.StatusForbidden, "This console is read-only: nothing can be changed here.")
		return false
	}
	if idem.ValidateScheduleName(name) != nil {
		c.consoleError(w, r, http.StatusBadRequest, "That is not a schedule name: names are 1 to 200 bytes of printable UTF-8.")
		return false
	}
	sc := c.caps.schedules
	if sc == nil {
		c.consoleError(w, r, http.StatusNotImplemented, "This store keeps no schedules.")
		return false
	}
	x, err := sc.GetSchedule(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		c.consoleError(w, r, http.StatusNotFound, "There is no such schedule: it may have been deleted.")
		return false
	} else if err != nil {
		c.storeFailed(w, r, "get schedule", err)
		return false
	}
	v.Confirm = &scheduleRow{Schedule: toSchedule(x), Valid: true}
	return true
}

// actPauseSchedule pauses or resumes the schedule the form names, once the
// form says confirm=yes; before that it asks, on the schedules page.
func (c *console) actPauseSchedule(action string) http.HandlerFunc {
	done := map[string]string{"pause": "paused", "resume": "resumed"}[action]
	return func(w http.ResponseWriter, r *http.Request) {
		name, after := r.PostFormValue("name"), r.PostFormValue("after")
		if r.PostFormValue("confirm") != "yes" {
			http.Redirect(w, r, basePath(r)+"/schedules"+query("confirm", action, "name", name, "after", after), http.StatusSeeOther)
			return
		}
		ctx, cancel := c.storeCtx(r)
		defer cancel()
		err := c.pauseSchedule(ctx, name, action == "pause")
		var bad badScheduleName
		switch {
		case errors.As(err, &bad):
			c.consoleError(w, r, http.StatusBadRequest, "That is not a schedule name: names are 1 to 200 bytes of printable UTF-8.")
		case errors.Is(err, errNoSchedules):
			c.consoleError(w, r, http.StatusNotImplemented, "This store keeps no schedules.")
		case errors.Is(err, store.ErrNotFound):
			c.consoleError(w, r, http.StatusNotFound, "There is no such schedule: it may have been deleted.")
		case err != nil:
			c.storeFailed(w, r, action+" schedule", err)
		default:
			http.Redirect(w, r, basePath(r)+"/schedules"+query("after", after, "done", done, "n", "1"), http.StatusSeeOther)
		}
	}
}

// actFireSchedule fires the schedule's next tick now once the form says
// confirm=yes; before that it asks, on the schedules page.
func (c *console) actFireSchedule(w http.ResponseWriter, r *http.Request) {
	name, after := r.PostFormValue("name"), r.PostFormValue("after")
	if r.PostFormValue("confirm") != "yes" {
		http.Redirect(w, r, basePath(r)+"/schedules"+query("confirm", "fire", "name", name, "after", after), http.StatusSeeOther)
		return
	}
	if idem.ValidateScheduleName(name) != nil {
		c.consoleError(w, r, http.StatusBadRequest, "That is not a schedule name: names are 1 to 200 bytes of printable UTF-8.")
		return
	}
	if c.caps.schedules == nil {
		c.consoleError(w, r, http.StatusNotImplemented, "This store keeps no schedules.")
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	tick, err := time.Parse(time.RFC3339Nano, r.PostFormValue("tick"))
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "The form does not say which tick to fire: open the schedules page again.")
		return
	}
	_, err = c.e.FireSchedule(ctx, name, tick)
	if status, msg := fireError(name, err); status == http.StatusInternalServerError {
		c.storeFailed(w, r, "fire schedule", err)
		return
	} else if status != 0 {
		c.consoleError(w, r, status, msg+".")
		return
	}
	http.Redirect(w, r, basePath(r)+"/schedules"+query("after", after, "done", "fired", "n", "1"), http.StatusSeeOther)
}

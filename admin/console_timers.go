package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

func (c *console) pageTimers(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := time.Now()
	v := &timersView{Filter: map[string]string{"type": q.Get("type"), "key": q.Get("key"), "overdue": q.Get("overdue")}, Now: now, Back: r.URL.RequestURI(), Flash: flash(r)}
	from, to, err := timeRange(q, "Due")
	var p *readmodel.TimerQuery
	if err == nil {
		p, err = timerQuery(q, from, to, now)
	}
	if err != nil {
		v.Problem = err.Error()
		c.render(w, r, http.StatusBadRequest, "timers", "Timers", v)
		return
	}
	v.Filter["from"], v.Filter["to"] = formTime(from), formTime(to)
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	var ts []store.Timer
	if tq := c.caps.timers; tq != nil && v.Filter["key"] == "" {
		ts, err = c.timerPage(ctx, tq, p, v)
	} else {
		ts, err = c.keyTimers(ctx, q, p, v)
	}
	if err == nil {
		v.Rows, err = c.timerRows(ctx, ts)
	}
	if err != nil {
		c.storeFailed(w, r, "list timers", err)
		return
	}
	c.render(w, r, http.StatusOK, "timers", "Timers", v)
}

// timerRows marks the timers whose saga finished or is gone, loading
// their sagas in one unit of work.
func (c *console) timerRows(ctx context.Context, ts []store.Timer) ([]timerRow, error) {
	rows := make([]timerRow, len(ts))
	keys := make([]store.Key, 0, len(ts))
	for i, t := range ts {
		rows[i].Timer = t
		if k := (store.Key{SagaType: t.SagaType, Key: t.Key}); !slices.Contains(keys, k) {
			keys = append(keys, k)
		}
	}
	if len(keys) == 0 {
		return rows, nil
	}
	uow, err := c.st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = uow.Rollback(ctx) }()
	res, err := uow.Load(ctx, &store.LoadParams{Keys: keys})
	if err != nil {
		return nil, err
	}
	for i := range rows {
		in := res.Instances[store.Key{SagaType: rows[i].SagaType, Key: rows[i].Key}]
		rows[i].Gone = in == nil
		rows[i].Finished = in != nil && in.Status() == store.StatusFinished
	}
	return rows, nil
}

// formTimer reads the timer a form names; false when the key is invalid
// (the error page is sent).
func (c *console) formTimer(w http.ResponseWriter, r *http.Request) (store.TimerKey, bool) {
	key, err := canonKey(r.PostFormValue("key"), maxFieldLen)
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return store.TimerKey{}, false
	}
	return store.TimerKey{SagaType: r.PostFormValue("type"), Key: key, Name: r.PostFormValue("name")}, true
}

// timerActionable sends an error page and returns false when the timer's
// saga finished or is gone: the console changes no such timer.
func (c *console) timerActionable(ctx context.Context, w http.ResponseWriter, r *http.Request, k store.TimerKey) bool {
	in, err := c.load(ctx, store.Key{SagaType: k.SagaType, Key: k.Key})
	switch {
	case err != nil:
		c.storeFailed(w, r, "load saga", err)
		return false
	case in == nil:
		c.consoleError(w, r, http.StatusConflict, "The saga of this timer no longer exists: the timer is left as it is.")
		return false
	case in.Status() == store.StatusFinished:
		c.consoleError(w, r, http.StatusConflict, "The saga of this timer has finished: the timer is left as it is.")
		return false
	}
	return true
}

// pageCancelTimer asks whether to cancel the timer the query names, as
// purging a dead letter asks first.
func (c *console) pageCancelTimer(w http.ResponseWriter, r *http.Request) {
	if c.readOnly {
		c.consoleError(w, r, http.StatusForbidden, "This console is read-only: nothing can be changed here.")
		return
	}
	q := r.URL.Query()
	key, err := canonKey(q.Get("key"), maxFieldLen)
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	k := store.TimerKey{SagaType: q.Get("type"), Key: key, Name: q.Get("name")}
	t, err := inspect.FindTimer(ctx, c.st, k)
	if errors.Is(err, store.ErrNotFound) {
		c.consoleError(w, r, http.StatusNotFound, "That timer no longer exists: it fired or was cancelled.")
		return
	} else if err != nil {
		c.storeFailed(w, r, "find timer", err)
		return
	}
	if !c.timerActionable(ctx, w, r, k) { // ask nothing the POST would refuse
		return
	}
	c.render(w, r, http.StatusOK, "timercancel", "Cancel timer", &timerConfirmView{T: t, Back: safeNext(q.Get("back")), Now: time.Now()})
}

func (c *console) actCancelTimer(w http.ResponseWriter, r *http.Request) {
	k, ok := c.formTimer(w, r)
	if !ok {
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		ask := query("type", k.SagaType, "key", k.Key, "name", k.Name, "back", safeNext(r.PostFormValue("back")))
		http.Redirect(w, r, basePath(r)+"/timers/cancel"+ask, http.StatusSeeOther)
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	if !c.timerActionable(ctx, w, r, k) {
		return
	}
	if err := inspect.CancelTimer(ctx, c.st, k); errors.Is(err, store.ErrNotFound) {
		c.consoleError(w, r, http.StatusNotFound, "That timer no longer exists: it fired or was cancelled.")
		return
	} else if err != nil {
		c.storeFailed(w, r, "cancel timer", err)
		return
	}
	back(w, r, "cancelled")
}

func (c *console) actRescheduleTimer(w http.ResponseWriter, r *http.Request) {
	k, ok := c.formTimer(w, r)
	if !ok {
		return
	}
	due, err := dueTime(Reschedule{In: r.PostFormValue("in")}, time.Now())
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "Give the delay as a duration like 10m, 2h or 0s.")
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	if !c.timerActionable(ctx, w, r, k) {
		return
	}
	if _, err := inspect.RescheduleTimer(ctx, c.st, k, due); errors.Is(err, store.ErrNotFound) {
		c.consoleError(w, r, http.StatusNotFound, "That timer no longer exists: it fired or was cancelled.")
		return
	} else if err != nil {
		c.storeFailed(w, r, "reschedule timer", err)
		return
	}
	back(w, r, "rescheduled")
}

// timerPage reads the timers page of the console through
// readmodel.TimerQuerier (one row more, to know whether another page
// follows), and its count when the store can count.
func (c *console) timerPage(ctx context.Context, tq readmodel.TimerQuerier, p *readmodel.TimerQuery, v *timersView) ([]store.Timer, error) {
	limit := p.Limit
	p.Limit++
	ts, err := tq.QueryTimers(ctx, p)
	if err == nil && p.Before != nil && len(ts) < limit {
		p.Before = nil
		ts, err = tq.QueryTimers(ctx, p)
	}
	if err != nil {
		return nil, fmt.Errorf("query timers: %w", err)
	}
	ts, hasPrev, hasNext := trimPage(ts, limit, p.Before != nil, p.After != nil)
	v.timerLinks(ts, hasPrev, hasNext)
	if qc := c.caps.queryCounter; qc != nil {
		n, err := qc.CountTimerQuery(ctx, p, readmodel.CountBound)
		if err != nil {
			return nil, fmt.Errorf("count timers: %w", err)
		}
		v.Count = &n
	}
	return ts, nil
}

// keyTimers reads the timers page through inspect.Timers: the timers of
// one key (through the store's index), or every timer of a store without
// readmodel.TimerQuerier. A key has few timers: its range start is applied to
// the page, its count is exact, and its previous page is its first.
func (c *console) keyTimers(ctx context.Context, q url.Values, p *readmodel.TimerQuery, v *timersView) ([]store.Timer, error) {
	f := timerFilter(q, v.Now)
	f.DueBefore, f.Limit = p.DueBefore, consolePage
	if f.Key == "" && (!p.DueFrom.IsZero() || p.Before != nil) {
		v.Problem = "This store cannot list timers from a due time, or previous pages."
		return nil, nil
	}
	if p.Before != nil {
		f.After = ""
	}
	ts, next, err := inspect.Timers(ctx, c.st, f)
	if err != nil {
		return nil, err
	}
	ts = slices.DeleteFunc(ts, func(t store.Timer) bool { return t.DueAt.Before(p.DueFrom) })
	if f.Key != "" {
		f.After, f.Limit = "", readmodel.CountBound+1
		all, _, err := inspect.Timers(ctx, c.st, f)
		if err != nil {
			return nil, err
		}
		all = slices.DeleteFunc(all, func(t store.Timer) bool { return t.DueAt.Before(p.DueFrom) })
		n := readmodel.BoundedCount(len(all), readmodel.CountBound)
		v.Count = &n
	}
	v.timerLinks(ts, f.After != "", next != "")
	return ts, nil
}

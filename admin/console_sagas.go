package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"path"
	"slices"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// askAction answers an unconfirmed action's POST with the instance page
// asking about it (q: what the page's actions card reads). The form's
// values stay in the request body, never in a URL, where a body or a
// reason would reach browser history and access logs.
//
// The question is the instance page, at the instance page's address: the
// browser's history gets that address (HX-Replace-Url; htmx would record
// the action's, which has no page), and the page's own links (a timer's
// "back") carry it without the question's values.
func (c *console) askAction(w http.ResponseWriter, r *http.Request, q url.Values) {
	ask := r.Clone(r.Context())
	dir := path.Dir(r.URL.EscapedPath()) // /instances/{type}/{key}, escaped
	ask.Method, ask.URL.RawPath, ask.URL.RawQuery = http.MethodGet, dir, q.Encode()
	ask.URL.Path, _ = url.PathUnescape(dir)
	ask.RequestURI = basePath(r) + ask.URL.RequestURI() // what basePath reads
	w.Header().Set("HX-Replace-Url", basePath(r)+dir)
	c.pageInstance(w, ask)
}

// actEndSaga ends the saga once the form says confirm=yes; before that the
// instance page asks.
func (c *console) actEndSaga(w http.ResponseWriter, r *http.Request) {
	k, err := c.sagaKeyOf(r)
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return
	}
	page := basePath(r) + "/instances/" + url.PathEscape(k.SagaType) + "/" + url.PathEscape(k.Key)
	reason := r.PostFormValue("reason")
	if r.PostFormValue("confirm") != "yes" {
		c.askAction(w, r, url.Values{"confirm": {"end"}, "reason": {reason}, "version": {r.PostFormValue("version")}})
		return
	}
	var version int64
	if _, err := fmt.Sscan(r.PostFormValue("version"), &version); err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "The form carries no version: open the saga again.")
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	_, err = inspect.EndSaga(ctx, c.st, k, &inspect.End{Reason: reason, Actor: consoleActor(r), Version: version, Now: time.Now()})
	if status, msg := endError(k, err); status == http.StatusInternalServerError {
		c.storeFailed(w, r, "end saga", err)
		return
	} else if status != 0 {
		c.consoleError(w, r, status, msg+".")
		return
	}
	http.Redirect(w, r, page+query("done", "ended", "n", "1"), http.StatusSeeOther)
}

// actSendEvent sends the event of the form once it says confirm=yes;
// before that the instance page asks, with the message ID it will have:
// confirming twice (a double click, a resubmission) sends one message.
func (c *console) actSendEvent(w http.ResponseWriter, r *http.Request) {
	k, err := c.sagaKeyOf(r)
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return
	}
	page := basePath(r) + "/instances/" + url.PathEscape(k.SagaType) + "/" + url.PathEscape(k.Key)
	typ, body, id := r.PostFormValue("type"), r.PostFormValue("body"), r.PostFormValue("id")
	if r.PostFormValue("confirm") != "yes" {
		c.askAction(w, r, url.Values{"confirm": {"send"}, "type": {typ}, "body": {body}, "id": {randomToken()}})
		return
	}
	if id == "" {
		c.consoleError(w, r, http.StatusBadRequest, "The form carries no message ID: open the saga again.")
		return
	}
	if !json.Valid([]byte(body)) {
		c.consoleError(w, r, http.StatusBadRequest, "The body is not JSON: go back and fix it.")
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	if _, status, err := c.sendEvent(ctx, k, &SendEvent{ID: id, Type: typ, Body: json.RawMessage(body)}, consoleActor(r)); err != nil {
		if status == http.StatusServiceUnavailable {
			c.storeFailed(w, r, "send event", err)
			return
		}
		c.consoleError(w, r, status, "The event was not sent: "+err.Error())
		return
	}
	http.Redirect(w, r, page+query("done", "sent", "n", "1"), http.StatusSeeOther)
}

// actionsFor builds the actions card of saga in, whose Why panel is why.
func (c *console) actionsFor(r *http.Request, in *store.Instance, why *whyPanel) *actionsView {
	q := r.URL.Query()
	a := &actionsView{Reason: q.Get("reason"), Type: q.Get("type"), Body: q.Get("body"), ID: q.Get("id"), Version: in.Version, State: in.State,
		Finished: in.Status() == store.StatusFinished}
	if confirm := q.Get("confirm"); confirm == "end" || confirm == "send" {
		a.Confirm = confirm
	}
	// The version the operator read: a saga that moved on since is shown
	// as it is now, and asked about again.
	if v := q.Get("version"); a.Confirm == "end" && v != "" && v != fmt.Sprint(in.Version) {
		a.Moved = true
	}
	if why != nil {
		for _, e := range why.Accepts {
			a.Events = append(a.Events, e.Event)
		}
	}
	if m, ok := c.e.Sagas()[in.SagaType]; ok {
		for _, t := range m.MessageTypes() {
			if !slices.Contains(a.Events, t) {
				a.Others = append(a.Others, t)
			}
		}
	}
	return a
}

func (c *console) pageSagaTypes(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	ts, err := c.sagaTypes(ctx)
	if err != nil {
		c.storeFailed(w, r, "saga types", err)
		return
	}
	c.render(w, r, http.StatusOK, "sagas", "Saga types", ts)
}

func (c *console) pageInstances(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := &instancesView{Filter: map[string]string{}, Attrs: attrFilters(q), Now: time.Now()}
	for _, k := range []string{"type", "state", "status", "prefix", "stuck", "from", "to", "reason", "idle"} {
		v.Filter[k] = q.Get(k)
	}
	for name, m := range c.e.Sagas() {
		v.Types = append(v.Types, name)
		if v.Filter["type"] == "" || v.Filter["type"] == name {
			for _, st := range m.Describe().States {
				if !slices.Contains(v.States, string(st.Name)) {
					v.States = append(v.States, string(st.Name))
				}
			}
		}
	}
	slices.Sort(v.Types)
	p, err := instanceQuery(q)
	if err == nil {
		err = liveInstanceQuery(q, p)
	}
	if err != nil {
		v.Problem = err.Error()
		c.render(w, r, http.StatusBadRequest, "instances", "Instances", v)
		return
	}
	sf, err := parseStuckFilter(q)
	if err != nil {
		v.Problem = err.Error()
		c.render(w, r, http.StatusBadRequest, "instances", "Instances", v)
		return
	}
	p.Limit, v.Q = consolePage, p
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	now := time.Now()
	var page *instanceRows
	filled := false
	if p.Stuck {
		filled, err = c.stuckPage(ctx, v, p, sf, now)
		page = &instanceRows{Rows: v.Rows}
	}
	if err == nil && !filled {
		page, err = c.instancePage(ctx, p)
	}
	if errors.Is(err, inspect.ErrUnsupported) {
		v.Problem = "This store cannot list stuck instances, previous pages or time ranges."
		page = &instanceRows{}
	} else if err != nil {
		c.storeFailed(w, r, "list instances", err)
		return
	}
	to := v.Filter["to"]
	v.instanceLinks(p, page)
	if sf.Idle > 0 {
		v.Filter["to"] = to // the idle time is its own field, not an "Updated before"
	}
	if p.Stuck && len(v.Rows) > 0 {
		if v.Reasons, err = c.stuckReasons(ctx, v.Rows, now); err != nil {
			c.storeFailed(w, r, "explain the stuck instances", err)
			return
		}
	}
	c.render(w, r, http.StatusOK, "instances", "Instances", v)
}

func (c *console) pageInstance(w http.ResponseWriter, r *http.Request) {
	typ := r.PathValue("type")
	key, err := canonKey(r.PathValue("key"), maxFieldLen)
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	k := store.Key{SagaType: typ, Key: key}
	in, err := c.load(ctx, k)
	if err != nil {
		c.storeFailed(w, r, "load saga", err)
		return
	}
	if in == nil {
		c.consoleError(w, r, http.StatusNotFound, "There is no saga "+typ+" with that key (it may have been swept).")
		return
	}
	back := *r.URL
	q := back.Query()
	for _, k := range actionParams {
		q.Del(k)
	}
	back.RawQuery = q.Encode()
	v := &instanceView{In: in, Back: back.RequestURI(), Flash: flash(r), Now: time.Now()}
	var ts []store.Timer
	var shown []store.JournalEntry // the latest; the download has them all
	if shown, v.Older, err = c.latestJournal(ctx, k); err == nil {
		ts, _, err = inspect.Timers(ctx, c.st, &inspect.TimerFilter{SagaType: typ, Key: key})
	}
	v.History = c.historyRows(ctx, shown)
	for _, t := range ts {
		v.Timers = append(v.Timers, timerRow{Timer: t, Finished: in.Status() == store.StatusFinished})
	}
	var dls []store.DeadLetter
	if err == nil {
		dls, _, err = inspect.DeadLetters(ctx, c.st, &inspect.DeadLetterFilter{SagaType: typ, Key: key}, "", consolePage)
		v.DeadLetters = c.deadLetterRows(ctx, dls)
	}
	var rs []store.Retry
	if err == nil {
		rs, err = c.retriesOf(ctx, k)
	}
	var ws []whyAdmission
	if err == nil && in.Status() != store.StatusFinished {
		var types []string // nil: not registered here, every wait of the key
		if m, ok := c.e.Sagas()[typ]; ok {
			types = m.MessageTypes()
		}
		ws, err = c.admissionWaitsOf(ctx, key, types)
	}
	if err != nil {
		c.storeFailed(w, r, "read saga details", err)
		return
	}
	var g *saga.Graph
	if m, ok := c.e.Sagas()[typ]; ok {
		gr := m.Describe().Graph()
		g = &gr
	}
	v.Why = buildWhy(whyInput{In: in, Graph: g, Timers: ts, DeadLetters: dls, Retries: rs, Admission: ws, Now: v.Now})
	v.Act = c.actionsFor(r, in, v.Why)
	c.render(w, r, http.StatusOK, "instance", typ+" "+shorten(key, 40), v)
}

// instancePage reads the page p selects (one row more, to know whether
// another page follows), and its count when the store can count. A page
// before a cursor that comes back short is the start of the list: the
// first page is read instead, so that it is full.
func (c *console) instancePage(ctx context.Context, p *readmodel.InstanceQuery) (*instanceRows, error) {
	queries := c.caps.instances != nil
	if !queries && (p.Before != nil || !p.UpdatedFrom.IsZero() || !p.UpdatedBefore.IsZero()) {
		return nil, fmt.Errorf("previous pages and time ranges: %w", inspect.ErrUnsupported)
	}
	limit := p.Limit
	p.Limit++
	defer func() { p.Limit = limit }()
	rows, err := inspect.Instances(ctx, c.st, p)
	if err == nil && p.Before != nil && len(rows) < limit {
		p.Before = nil
		rows, err = inspect.Instances(ctx, c.st, p)
	}
	if err != nil {
		return nil, err
	}
	out := &instanceRows{}
	out.Rows, out.HasPrev, out.HasNext = trimPage(rows, limit, p.Before != nil, p.After != nil)
	qc := c.caps.queryCounter
	if qc == nil {
		return out, nil
	}
	n, err := qc.CountInstanceQuery(ctx, p, readmodel.CountBound)
	if err != nil {
		return nil, fmt.Errorf("count instances: %w", err)
	}
	out.Count = &n
	return out, nil
}

func (c *console) downloadHistory(w http.ResponseWriter, r *http.Request) {
	key, err := canonKey(r.PathValue("key"), maxFieldLen)
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return
	}
	c.writeHistory(w, r, store.Key{SagaType: r.PathValue("type"), Key: key}, true)
}

// historyRows are the journal's entries as the instance page shows them.
func (c *console) historyRows(ctx context.Context, j []store.JournalEntry) []historyRow {
	entries := c.historyEntries(ctx, j)
	rows := make([]historyRow, len(entries))
	for i, e := range entries {
		rows[i] = historyRow{HistoryEntry: e, Duration: time.Duration(e.DurationMicros) * time.Microsecond}
		rows[i].PayloadText = payloadText(e.Payload, e.PayloadEncoding)
		for _, name := range slices.Sorted(maps.Keys(e.Headers)) {
			rows[i].HeaderList = append(rows[i].HeaderList, [2]string{name, e.Headers[name]})
		}
		rows[i].Ops = diffOps(e.Diff)
		if e.EventType == inspect.EndEventType && e.PayloadEncoding == "json" {
			var end struct {
				Reason string `json:"reason"`
			}
			if json.Unmarshal(e.Payload, &end) == nil {
				rows[i].EndReason = end.Reason
			}
		}
	}
	return rows
}

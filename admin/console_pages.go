package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

const consolePage = 50

// flash turns ?done=&n= into a fixed sentence: the query cannot inject
// text of its own.
func flash(r *http.Request) string {
	n := atoi(r.URL.Query().Get("n"))
	what := map[string]string{
		"replayed": "dead letter(s) re-queued. Each replay is pending until an engine consumes the message: the dead letter's page then says whether it succeeded or failed again.",
		"purged":   "dead letter(s) purged.", "cancelled": "timer cancelled.", "rescheduled": "timer rescheduled.",
		"ended":    "saga ended: its timers are cancelled, and it ignores every event from now on.",
		"sent":     "event sent. The journal shows it once an engine has applied it.",
		"retried":  "message published again now. The journal shows it once an engine has applied it.",
		"archived": "dead letter(s) archived: they are listed with the Archived filter, and can be restored.", "restored": "dead letter(s) restored.",
	}[r.URL.Query().Get("done")]
	if what == "" {
		return ""
	}
	return strconv.Itoa(n) + " " + what
}

func (s *console) pageOverview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	o, err := s.overview(ctx)
	if err != nil {
		s.storeFailed(w, r, "overview", err)
		return
	}
	s.charts.touch(time.Now()) // the charts sample while someone looks
	s.render(w, r, http.StatusOK, "overview", "Overview", o)
}

func (s *console) pageSagaTypes(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	ts, err := s.sagaTypes(ctx)
	if err != nil {
		s.storeFailed(w, r, "saga types", err)
		return
	}
	s.render(w, r, http.StatusOK, "sagas", "Saga types", ts)
}

type instancesView struct {
	Q       *readmodel.InstanceQuery
	Filter  map[string]string
	Types   []string
	States  []string
	Rows    []*store.Instance
	Next    string
	Problem string
	// Attrs are the attribute filters (name=value) as given.
	Attrs []string
	Now   time.Time
	// pager has the count, and the query strings of the previous and next
	// pages, every filter kept.
	pager
	// Reasons says, in the stuck view, why each row is listed
	// (console_why_retrying.go).
	Reasons []string
	// Chips are the stuck view's urgent reasons with their counts, most
	// urgent first (console_stuck.go).
	Chips []stuckChip
}

func (s *console) pageInstances(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := &instancesView{Filter: map[string]string{}, Attrs: attrFilters(q), Now: time.Now()}
	for _, k := range []string{"type", "state", "status", "prefix", "stuck", "from", "to", "reason", "idle"} {
		v.Filter[k] = q.Get(k)
	}
	for name, m := range s.e.Sagas() {
		v.Types = append(v.Types, name)
		if g, ok := m.(grapher); ok && (v.Filter["type"] == "" || v.Filter["type"] == name) {
			for _, st := range g.Graph().States {
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
		s.render(w, r, http.StatusBadRequest, "instances", "Instances", v)
		return
	}
	sf, err := parseStuckFilter(q)
	if err != nil {
		v.Problem = err.Error()
		s.render(w, r, http.StatusBadRequest, "instances", "Instances", v)
		return
	}
	p.Limit, v.Q = consolePage, p
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	now := time.Now()
	var page *instanceRows
	filled := false
	if p.Stuck {
		filled, err = s.stuckPage(ctx, v, p, sf, now)
		page = &instanceRows{Rows: v.Rows}
	}
	if err == nil && !filled {
		page, err = s.instancePage(ctx, p)
	}
	if errors.Is(err, inspect.ErrUnsupported) {
		v.Problem = "This store cannot list stuck instances, previous pages or time ranges."
		page = &instanceRows{}
	} else if err != nil {
		s.storeFailed(w, r, "list instances", err)
		return
	}
	to := v.Filter["to"]
	v.instanceLinks(p, page)
	if sf.Idle > 0 {
		v.Filter["to"] = to // the idle time is its own field, not an "Updated before"
	}
	if p.Stuck && len(v.Rows) > 0 {
		if v.Reasons, err = s.stuckReasons(ctx, v.Rows, now); err != nil {
			s.storeFailed(w, r, "explain the stuck instances", err)
			return
		}
	}
	s.render(w, r, http.StatusOK, "instances", "Instances", v)
}

// journalShown bounds the journal entries the instance page renders (with
// their payloads, diffs and the emitted messages' sent state), the latest
// ones: a long-lived saga's page stays small, live refresh included.
const journalShown = 200

type instanceView struct {
	In          *store.Instance
	History     []historyRow // the latest entries of the journal, with their detail
	Older       int          // the entries of the journal before History
	Timers      []timerRow
	DeadLetters []dlRow
	Why         *whyPanel
	Act         *actionsView
	Back        string
	Flash       string
	Now         time.Time
}

func (s *console) pageInstance(w http.ResponseWriter, r *http.Request) {
	typ := r.PathValue("type")
	key, err := canonKey(r.PathValue("key"), maxFieldLen)
	if err != nil {
		s.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	k := store.Key{SagaType: typ, Key: key}
	in, err := s.load(ctx, k)
	if err != nil {
		s.storeFailed(w, r, "load saga", err)
		return
	}
	if in == nil {
		s.consoleError(w, r, http.StatusNotFound, "There is no saga "+typ+" with that key (it may have been swept).")
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
	if shown, v.Older, err = s.latestJournal(ctx, k); err == nil {
		ts, _, err = inspect.Timers(ctx, s.st, &inspect.TimerFilter{SagaType: typ, Key: key})
	}
	v.History = s.historyRows(ctx, shown)
	for _, t := range ts {
		v.Timers = append(v.Timers, timerRow{Timer: t, Finished: in.Status() == store.StatusFinished})
	}
	var dls []store.DeadLetter
	if err == nil {
		dls, _, err = inspect.DeadLetters(ctx, s.st, &inspect.DeadLetterFilter{SagaType: typ, Key: key}, "", consolePage)
		v.DeadLetters = s.deadLetterRows(ctx, dls)
	}
	var rs []store.Retry
	if err == nil {
		rs, err = s.retriesOf(ctx, k)
	}
	if err != nil {
		s.storeFailed(w, r, "read saga details", err)
		return
	}
	m, _ := s.e.Sagas()[typ].(grapher)
	v.Why = buildWhy(whyInput{In: in, Machine: m, Timers: ts, DeadLetters: dls, Retries: rs, Now: v.Now})
	v.Act = s.actionsFor(r, in, v.Why)
	s.render(w, r, http.StatusOK, "instance", typ+" "+shorten(key, 40), v)
}

type deadLettersView struct {
	Filter map[string]string
	// Chips counts every reason within the other filters; Counts what the
	// filters select, with the mark a confirmed bulk action is bound to.
	Chips   *DeadLetterCounts
	Counts  *DeadLetterCounts
	Rows    []dlRow
	Next    string
	Confirm string
	Flash   string
	Now     time.Time
	// Triage is the groups and the purge retention (console_deadletters.go).
	Triage *triageView
}

func (s *console) pageDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := &deadLettersView{Filter: map[string]string{}, Flash: flash(r), Now: time.Now()}
	for _, k := range []string{"type", "reason", "message_type", "key", "state", "fingerprint", "archived", "archived_before"} {
		v.Filter[k] = q.Get(k)
	}
	if c := q.Get("confirm"); c == "replay" || c == "purge" || c == "archive" || c == "restore" {
		v.Confirm = c
	}
	if p := triageProblem(q); p != "" {
		s.consoleError(w, r, http.StatusBadRequest, "Bad filter: "+p+".")
		return
	}
	f := deadLetterFilter(q)
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	f.AsOf = "" // the page shows what is stored now
	var err error
	var dls []store.DeadLetter
	if v.Chips, err = s.reasonChips(ctx, f); err == nil {
		v.Counts = v.Chips
		if f.Reason != "" {
			v.Counts, err = s.deadLetterCounts(ctx, f)
		}
	}
	if err == nil {
		dls, v.Next, err = inspect.DeadLetters(ctx, s.st, f, q.Get("after"), consolePage)
	}
	if err == nil {
		v.Triage, err = s.triage(ctx, f)
	}
	if err != nil {
		s.storeFailed(w, r, "list dead letters", err)
		return
	}
	v.Rows = s.deadLetterRows(ctx, dls)
	s.render(w, r, http.StatusOK, "deadletters", "Dead letters", v)
}

type deadLetterView struct {
	D          DeadLetter
	Body       string
	BodyKind   string
	SagaExists bool
	Confirm    bool
	// Purgeable is set when the dead letter was archived longer ago than
	// Retention: the console offers to purge only those.
	Purgeable bool
	Retention string
}

func (s *console) pageDeadLetter(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	d, err := s.st.GetDeadLetter(ctx, r.PathValue("id"))
	if errors.Is(err, store.ErrNotFound) {
		s.consoleError(w, r, http.StatusNotFound, "There is no such dead letter: it may have been replayed or purged.")
		return
	}
	if err != nil {
		s.storeFailed(w, r, "get dead letter", err)
		return
	}
	v := &deadLetterView{D: inspect.DeadLetterOf(d), Confirm: r.URL.Query().Get("confirm") == "purge", Retention: span(inspect.PurgeRetention)}
	v.Purgeable = d.Archived() && d.ArchivedAt.Before(time.Now().Add(-inspect.PurgeRetention))
	v.Body, v.BodyKind = bodyText(d.Envelope.Body)
	v.SagaExists = s.deadLetterRows(ctx, []store.DeadLetter{*d})[0].SagaExists
	s.render(w, r, http.StatusOK, "deadletter", "Dead letter", v)
}

func (s *console) actReplay(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	err := s.e.ReplayDeadLetter(ctx, r.PathValue("id"))
	if errors.Is(err, store.ErrNotFound) {
		s.consoleError(w, r, http.StatusNotFound, "There is no such dead letter: it may have been replayed or purged already.")
		return
	}
	if msg := replayRefused(err); msg != "" {
		s.consoleError(w, r, http.StatusConflict, "Not replayed: "+msg+".")
		return
	}
	if err != nil {
		s.storeFailed(w, r, "replay dead letter", err)
		return
	}
	http.Redirect(w, r, basePath(r)+"/dead-letters?done=replayed&n=1", http.StatusSeeOther)
}

func (s *console) actPurge(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if r.PostFormValue("confirm") != "yes" {
		http.Redirect(w, r, basePath(r)+"/dead-letters/"+url.PathEscape(id)+"?confirm=purge", http.StatusSeeOther)
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	msg, err := s.purgeOneRefused(ctx, id)
	if err != nil {
		s.storeFailed(w, r, "purge dead letter", err)
		return
	}
	if msg != "" {
		s.consoleError(w, r, http.StatusConflict, msg)
		return
	}
	n, err := s.st.DeleteDeadLetters(ctx, []string{id})
	if err != nil {
		s.storeFailed(w, r, "purge dead letter", err)
		return
	}
	http.Redirect(w, r, basePath(r)+"/dead-letters?done=purged&n="+strconv.Itoa(n), http.StatusSeeOther)
}

// actBulk replays or purges every dead letter the form's filters select,
// once the form says confirm=yes; before that it shows the count.
func (s *console) actBulk(w http.ResponseWriter, r *http.Request) {
	action := r.PostFormValue("action")
	if action != "replay" && action != "purge" && action != "archive" && action != "restore" {
		s.consoleError(w, r, http.StatusBadRequest, "Unknown bulk action.")
		return
	}
	_ = r.ParseForm()
	f := deadLetterFilter(r.PostForm) // with the as_of of the count confirmed
	filters := query("type", f.SagaType, "reason", f.Reason, "message_type", f.MessageType, "key", f.Key,
		"state", r.PostFormValue("state"), "fingerprint", f.Fingerprint, "archived", r.PostFormValue("archived"), "archived_before", purgeBefore(action, f, r.PostFormValue("confirm") == "yes"))
	if msg := s.purgeRefused(action, f); msg != "" {
		s.consoleError(w, r, http.StatusBadRequest, msg)
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		sep := "?"
		if filters != "" {
			sep = "&"
		}
		http.Redirect(w, r, basePath(r)+"/dead-letters"+filters+sep+"confirm="+action, http.StatusSeeOther)
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	res, err := s.bulkTriage(ctx, &triageAction{Action: action, Filter: f})
	done := map[string]string{"replay": "replayed", "purge": "purged", "archive": "archived", "restore": "restored"}[action]
	if err != nil && res != nil && !errors.Is(err, readmodel.ErrBadMark) {
		s.log.ErrorContext(r.Context(), "admin console: "+action+" dead letters", "error", err, "path", r.URL.Path, "done", res.Done)
		s.consoleError(w, r, http.StatusInternalServerError, fmt.Sprintf("Stopped after %d dead letter(s) %s. See the server log, then retry.", res.Done, done))
		return
	}
	if err != nil {
		s.storeFailed(w, r, action+" dead letters", err)
		return
	}
	http.Redirect(w, r, basePath(r)+"/dead-letters?done="+done+"&n="+strconv.Itoa(res.Done), http.StatusSeeOther)
}

type timersView struct {
	Filter  map[string]string
	Rows    []timerRow
	Now     time.Time
	Back    string
	Flash   string
	Problem string
	// pager has the count and the links of the previous and next pages.
	pager
}

// timerRow is a timer as the console lists it. The timer of a finished
// saga (or of one that is gone) is marked, and offers no action: there is
// nothing left for it to time out.
type timerRow struct {
	store.Timer
	Finished bool
	Gone     bool
}

// Inert reports whether the timer's saga finished or is gone.
func (t timerRow) Inert() bool { return t.Finished || t.Gone }

func (s *console) pageTimers(w http.ResponseWriter, r *http.Request) {
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
		s.render(w, r, http.StatusBadRequest, "timers", "Timers", v)
		return
	}
	v.Filter["from"], v.Filter["to"] = formTime(from), formTime(to)
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	var ts []store.Timer
	if tq := s.caps.timers; tq != nil && v.Filter["key"] == "" {
		ts, err = s.timerPage(ctx, tq, p, v)
	} else {
		ts, err = s.keyTimers(ctx, q, p, v)
	}
	if err == nil {
		v.Rows, err = s.timerRows(ctx, ts)
	}
	if err != nil {
		s.storeFailed(w, r, "list timers", err)
		return
	}
	s.render(w, r, http.StatusOK, "timers", "Timers", v)
}

// timerRows marks the timers whose saga finished or is gone, loading
// their sagas in one unit of work.
func (s *console) timerRows(ctx context.Context, ts []store.Timer) ([]timerRow, error) {
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
	uow, err := s.st.Begin(ctx)
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
func (s *console) formTimer(w http.ResponseWriter, r *http.Request) (store.TimerKey, bool) {
	key, err := canonKey(r.PostFormValue("key"), maxFieldLen)
	if err != nil {
		s.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return store.TimerKey{}, false
	}
	return store.TimerKey{SagaType: r.PostFormValue("type"), Key: key, Name: r.PostFormValue("name")}, true
}

// back returns to the page the form came from, with a flash code.
func back(w http.ResponseWriter, r *http.Request, done string) {
	target, sep := safeNext(r.PostFormValue("back")), "?"
	if u, err := url.Parse(target); err == nil {
		q := u.Query()
		q.Del("done")
		q.Del("n")
		u.RawQuery = q.Encode()
		if target = u.String(); u.RawQuery != "" {
			sep = "&"
		}
	}
	http.Redirect(w, r, basePath(r)+target+sep+"done="+done+"&n=1", http.StatusSeeOther)
}

// timerActionable sends an error page and returns false when the timer's
// saga finished or is gone: the console changes no such timer.
func (s *console) timerActionable(ctx context.Context, w http.ResponseWriter, r *http.Request, k store.TimerKey) bool {
	in, err := s.load(ctx, store.Key{SagaType: k.SagaType, Key: k.Key})
	switch {
	case err != nil:
		s.storeFailed(w, r, "load saga", err)
		return false
	case in == nil:
		s.consoleError(w, r, http.StatusConflict, "The saga of this timer no longer exists: the timer is left as it is.")
		return false
	case in.Status() == store.StatusFinished:
		s.consoleError(w, r, http.StatusConflict, "The saga of this timer has finished: the timer is left as it is.")
		return false
	}
	return true
}

// timerConfirmView is the question asked before a timer is cancelled.
type timerConfirmView struct {
	T    *store.Timer
	Back string
	Now  time.Time
}

// pageCancelTimer asks whether to cancel the timer the query names, as
// purging a dead letter asks first.
func (s *console) pageCancelTimer(w http.ResponseWriter, r *http.Request) {
	if s.readOnly {
		s.consoleError(w, r, http.StatusForbidden, "This console is read-only: nothing can be changed here.")
		return
	}
	q := r.URL.Query()
	key, err := canonKey(q.Get("key"), maxFieldLen)
	if err != nil {
		s.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	k := store.TimerKey{SagaType: q.Get("type"), Key: key, Name: q.Get("name")}
	t, err := inspect.FindTimer(ctx, s.st, k)
	if errors.Is(err, store.ErrNotFound) {
		s.consoleError(w, r, http.StatusNotFound, "That timer no longer exists: it fired or was cancelled.")
		return
	} else if err != nil {
		s.storeFailed(w, r, "find timer", err)
		return
	}
	if !s.timerActionable(ctx, w, r, k) { // ask nothing the POST would refuse
		return
	}
	s.render(w, r, http.StatusOK, "timercancel", "Cancel timer", &timerConfirmView{T: t, Back: safeNext(q.Get("back")), Now: time.Now()})
}

func (s *console) actCancelTimer(w http.ResponseWriter, r *http.Request) {
	k, ok := s.formTimer(w, r)
	if !ok {
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		ask := query("type", k.SagaType, "key", k.Key, "name", k.Name, "back", safeNext(r.PostFormValue("back")))
		http.Redirect(w, r, basePath(r)+"/timers/cancel"+ask, http.StatusSeeOther)
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	if !s.timerActionable(ctx, w, r, k) {
		return
	}
	if err := inspect.CancelTimer(ctx, s.st, k); errors.Is(err, store.ErrNotFound) {
		s.consoleError(w, r, http.StatusNotFound, "That timer no longer exists: it fired or was cancelled.")
		return
	} else if err != nil {
		s.storeFailed(w, r, "cancel timer", err)
		return
	}
	back(w, r, "cancelled")
}

func (s *console) actRescheduleTimer(w http.ResponseWriter, r *http.Request) {
	k, ok := s.formTimer(w, r)
	if !ok {
		return
	}
	due, err := dueTime(Reschedule{In: r.PostFormValue("in")}, time.Now())
	if err != nil {
		s.consoleError(w, r, http.StatusBadRequest, "Give the delay as a duration like 10m, 2h or 0s.")
		return
	}
	ctx, cancel := s.storeCtx(r)
	defer cancel()
	if !s.timerActionable(ctx, w, r, k) {
		return
	}
	if _, err := inspect.RescheduleTimer(ctx, s.st, k, due); errors.Is(err, store.ErrNotFound) {
		s.consoleError(w, r, http.StatusNotFound, "That timer no longer exists: it fired or was cancelled.")
		return
	} else if err != nil {
		s.storeFailed(w, r, "reschedule timer", err)
		return
	}
	back(w, r, "rescheduled")
}

package admin

import (
	"net/http"
	"net/url"
	"strconv"
	"time"

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

// timerConfirmView is the question asked before a timer is cancelled.
type timerConfirmView struct {
	T    *store.Timer
	Back string
	Now  time.Time
}

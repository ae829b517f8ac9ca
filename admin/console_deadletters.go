package admin

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// dlRow is a dead letter as the console's tables show it.
type dlRow struct {
	store.DeadLetter
	// SagaExists is true when the saga the dead letter names exists, so
	// that the console links only to sagas it can show.
	SagaExists bool
	// History sums up the replays (see History).
	History string
	// State is what became of the latest replay (store.DeadLetter.State).
	State store.DeadLetterState
}

// deadLetterRows makes the rows of ds, reading which of their sagas exist
// in one load. A load that fails leaves every saga unlinked rather than
// failing the page.
func (c *console) deadLetterRows(ctx context.Context, ds []store.DeadLetter) []dlRow {
	rows := make([]dlRow, len(ds))
	var keys []store.Key
	for i := range ds {
		rows[i] = dlRow{DeadLetter: ds[i], History: History(&ds[i]), State: ds[i].State()}
		if ds[i].SagaType != "" {
			keys = append(keys, store.Key{SagaType: ds[i].SagaType, Key: ds[i].Key})
		}
	}
	if len(keys) == 0 {
		return rows
	}
	found, err := c.existing(ctx, keys)
	if err != nil {
		c.log.WarnContext(ctx, "console: read the sagas of dead letters", "error", err)
		return rows
	}
	for i := range rows {
		rows[i].SagaExists = found[store.Key{SagaType: rows[i].SagaType, Key: rows[i].Key}]
	}
	return rows
}

// existing reports which of keys are stored sagas, in one load.
func (c *console) existing(ctx context.Context, keys []store.Key) (map[store.Key]bool, error) {
	uow, err := c.st.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = uow.Rollback(ctx) }()
	res, err := uow.Load(ctx, &store.LoadParams{Keys: keys})
	if err != nil {
		return nil, err
	}
	out := make(map[store.Key]bool, len(res.Instances))
	for k := range res.Instances {
		out[k] = true
	}
	return out, nil
}

// bodyText is a dead letter's body as the console shows it, and what it
// is: indented JSON, the stored text itself (the template escapes it for
// HTML), or a hex dump of a body that is not UTF-8 — as idem dlq show
// prints it.
func bodyText(b []byte) (string, string) {
	switch {
	case len(b) == 0:
		return "", "empty"
	case json.Valid(b) && utf8.Valid(b): // json.Valid takes bytes that are not UTF-8 in strings
		return prettyJSON(b), "JSON"
	case utf8.Valid(b):
		return string(b), "text"
	}
	return hex.Dump(b), "binary, hex dump"
}

// reasonChips counts every reason within f's other filters: the chips show
// each reason and the total whatever reason f selects.
func (c *console) reasonChips(ctx context.Context, f *inspect.DeadLetterFilter) (*DeadLetterCounts, error) {
	all := *f
	all.Reason, all.AsOf = "", ""
	return c.deadLetterCounts(ctx, &all)
}

// triageView is what the dead-letters page shows for triage: the groups
// of the dead letters its filters select, and the purge retention.
type triageView struct {
	Groups []DeadLetterGroup
	// Grouped is false when the store cannot group (or the filters name a
	// message type): the page then shows no groups.
	Grouped bool
	// Retention is how long a dead letter stays archived before the
	// console offers to purge it (inspect.PurgeRetention), as text.
	Retention string
}

// consoleGroups bounds the groups the dead-letters page shows.
const consoleGroups = 20

// triage reads the groups of the dead letters f selects.
func (c *console) triage(ctx context.Context, f *inspect.DeadLetterFilter) (*triageView, error) {
	v := &triageView{Retention: span(inspect.PurgeRetention)}
	gs, err := inspect.Groups(ctx, c.st, f, consoleGroups)
	if errors.Is(err, inspect.ErrUnsupported) {
		return v, nil
	}
	if err != nil {
		return nil, err
	}
	v.Grouped = true
	for i := range gs {
		v.Groups = append(v.Groups, groupOf(&gs[i]))
	}
	return v, nil
}

// purgeBefore bounds a console purge to the dead letters archived longer
// ago than inspect.PurgeRetention: it sets f.ArchivedBefore to that
// cutoff when unset on the first, unconfirmed, POST, and returns it as the
// confirmation carries it ("" for other actions). The confirmation then
// acts on exactly the dead letters it counted with that cutoff; a
// confirmed purge without one is refused (purgeRefused).
func purgeBefore(action string, f *inspect.DeadLetterFilter, confirmed bool) string {
	if action != "purge" {
		return ""
	}
	if f.ArchivedBefore.IsZero() && !confirmed {
		f.ArchivedBefore = time.Now().UTC().Add(-inspect.PurgeRetention)
	}
	return f.ArchivedBefore.Format(time.RFC3339Nano)
}

// purgeRefused says why the console refuses a bulk purge of f, or "": it
// purges only archived dead letters, archived longer ago than the
// retention.
func (c *console) purgeRefused(action string, f *inspect.DeadLetterFilter) string {
	if action != "purge" {
		return ""
	}
	if f.ArchivedBefore.IsZero() || f.ArchivedBefore.After(time.Now().Add(-inspect.PurgeRetention)) {
		return "The console purges only dead letters archived more than " + span(inspect.PurgeRetention) + " ago: archive them first, and purge them once that has passed."
	}
	return ""
}

// purgeOneRefused says why the console refuses to purge the dead letter
// id, or "" (a missing one, store.ErrNotFound, is left to the delete,
// which counts 0). Any other error of the read is returned: the console
// cannot tell whether the letter may go.
func (c *console) purgeOneRefused(ctx context.Context, id string) (string, error) {
	d, err := c.st.GetDeadLetter(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read dead letter before purging it: %w", err)
	}
	if !d.Archived() || d.ArchivedAt.After(time.Now().Add(-inspect.PurgeRetention)) {
		return "Not purged: the console purges only dead letters archived more than " + span(inspect.PurgeRetention) + " ago. Archive it first; restore it if it is still needed.", nil
	}
	return "", nil
}

// selectedView is the question asked before acting on the dead letters
// selected with the list's checkboxes (or one dead letter's page).
type selectedView struct {
	// Action is replay, archive or restore.
	Action string
	IDs    []string
	// Back is the list the selection came from.
	Back string
}

// actSelected replays, archives or restores the dead letters the form's
// id fields name (the list's checkboxes), once the form says
// confirm=yes; before that it asks, naming them.
func (c *console) actSelected(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm()
	action := r.PostFormValue("action")
	if action != "replay" && action != "archive" && action != "restore" {
		c.consoleError(w, r, http.StatusBadRequest, "Unknown action on the selected dead letters: want replay, archive or restore.")
		return
	}
	ids := uniqueIDs(r.PostForm["id"])
	if len(ids) == 0 {
		c.consoleError(w, r, http.StatusBadRequest, "No dead letter selected: tick the boxes of the dead letters to act on, then press the button again.")
		return
	}
	if len(ids) > maxSelected {
		c.consoleError(w, r, http.StatusBadRequest, fmt.Sprintf("Too many dead letters selected (%d, at most %d): act on a filter instead.", len(ids), maxSelected))
		return
	}
	back := r.PostFormValue("back")
	if !strings.HasPrefix(back, "/dead-letters") {
		back = "/dead-letters"
	}
	if r.PostFormValue("confirm") != "yes" {
		c.render(w, r, http.StatusOK, "dlq", "Confirm", &selectedView{Action: action, IDs: ids, Back: back})
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	res, err := c.bulkTriage(ctx, &triageAction{Action: action, Filter: &inspect.DeadLetterFilter{}, IDs: ids})
	if errors.Is(err, inspect.ErrUnsupported) {
		c.consoleError(w, r, http.StatusNotImplemented, "This store does not archive dead letters.")
		return
	}
	if err != nil {
		c.storeFailed(w, r, action+" selected dead letters", err)
		return
	}
	done := map[string]string{"replay": "replayed", "archive": "archived", "restore": "restored"}[action]
	http.Redirect(w, r, basePath(r)+"/dead-letters?done="+done+"&n="+strconv.Itoa(res.Done), http.StatusSeeOther)
}

// maxSelected bounds a selection: a page of the list, in the console, and
// the IDs of one POST /api/dead-letters/archive or /restore.
const maxSelected = 500

func (c *console) pageDeadLetters(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := &deadLettersView{Filter: map[string]string{}, Flash: flash(r), Now: time.Now()}
	for _, k := range []string{"type", "reason", "message_type", "key", "state", "fingerprint", "archived", "archived_before"} {
		v.Filter[k] = q.Get(k)
	}
	if confirm := q.Get("confirm"); confirm == "replay" || confirm == "purge" || confirm == "archive" || confirm == "restore" {
		v.Confirm = confirm
	}
	if p := triageProblem(q); p != "" {
		c.consoleError(w, r, http.StatusBadRequest, "Bad filter: "+p+".")
		return
	}
	f := deadLetterFilter(q)
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	f.AsOf = "" // the page shows what is stored now
	var err error
	var dls []store.DeadLetter
	if v.Chips, err = c.reasonChips(ctx, f); err == nil {
		v.Counts = v.Chips
		if f.Reason != "" {
			v.Counts, err = c.deadLetterCounts(ctx, f)
		}
	}
	if err == nil {
		dls, v.Next, err = inspect.DeadLetters(ctx, c.st, f, q.Get("after"), consolePage)
	}
	if err == nil {
		v.Triage, err = c.triage(ctx, f)
	}
	if err != nil {
		c.storeFailed(w, r, "list dead letters", err)
		return
	}
	v.Rows = c.deadLetterRows(ctx, dls)
	c.render(w, r, http.StatusOK, "deadletters", "Dead letters", v)
}

func (c *console) pageDeadLetter(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	d, err := c.st.GetDeadLetter(ctx, r.PathValue("id"))
	if errors.Is(err, store.ErrNotFound) {
		c.consoleError(w, r, http.StatusNotFound, "There is no such dead letter: it may have been replayed or purged.")
		return
	}
	if err != nil {
		c.storeFailed(w, r, "get dead letter", err)
		return
	}
	v := &deadLetterView{D: inspect.DeadLetterOf(d), Confirm: r.URL.Query().Get("confirm") == "purge", Retention: span(inspect.PurgeRetention)}
	v.Purgeable = d.Archived() && d.ArchivedAt.Before(time.Now().Add(-inspect.PurgeRetention))
	v.Body, v.BodyKind = bodyText(d.Envelope.Body)
	v.SagaExists = c.deadLetterRows(ctx, []store.DeadLetter{*d})[0].SagaExists
	c.render(w, r, http.StatusOK, "deadletter", "Dead letter", v)
}

func (c *console) actReplay(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	err := c.e.ReplayDeadLetter(ctx, r.PathValue("id"))
	if errors.Is(err, store.ErrNotFound) {
		c.consoleError(w, r, http.StatusNotFound, "There is no such dead letter: it may have been replayed or purged already.")
		return
	}
	if msg := replayRefused(err); msg != "" {
		c.consoleError(w, r, http.StatusConflict, "Not replayed: "+msg+".")
		return
	}
	if err != nil {
		c.storeFailed(w, r, "replay dead letter", err)
		return
	}
	http.Redirect(w, r, basePath(r)+"/dead-letters?done=replayed&n=1", http.StatusSeeOther)
}

func (c *console) actPurge(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if r.PostFormValue("confirm") != "yes" {
		http.Redirect(w, r, basePath(r)+"/dead-letters/"+url.PathEscape(id)+"?confirm=purge", http.StatusSeeOther)
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	msg, err := c.purgeOneRefused(ctx, id)
	if err != nil {
		c.storeFailed(w, r, "purge dead letter", err)
		return
	}
	if msg != "" {
		c.consoleError(w, r, http.StatusConflict, msg)
		return
	}
	n, err := c.st.DeleteDeadLetters(ctx, []string{id})
	if err != nil {
		c.storeFailed(w, r, "purge dead letter", err)
		return
	}
	http.Redirect(w, r, basePath(r)+"/dead-letters?done=purged&n="+strconv.Itoa(n), http.StatusSeeOther)
}

// actBulk replays or purges every dead letter the form's filters select,
// once the form says confirm=yes; before that it shows the count.
func (c *console) actBulk(w http.ResponseWriter, r *http.Request) {
	action := r.PostFormValue("action")
	if action != "replay" && action != "purge" && action != "archive" && action != "restore" {
		c.consoleError(w, r, http.StatusBadRequest, "Unknown bulk action.")
		return
	}
	_ = r.ParseForm()
	f := deadLetterFilter(r.PostForm) // with the as_of of the count confirmed
	filters := query("type", f.SagaType, "reason", f.Reason, "message_type", f.MessageType, "key", f.Key,
		"state", r.PostFormValue("state"), "fingerprint", f.Fingerprint, "archived", r.PostFormValue("archived"), "archived_before", purgeBefore(action, f, r.PostFormValue("confirm") == "yes"))
	if msg := c.purgeRefused(action, f); msg != "" {
		c.consoleError(w, r, http.StatusBadRequest, msg)
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
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	res, err := c.bulkTriage(ctx, &triageAction{Action: action, Filter: f})
	done := map[string]string{"replay": "replayed", "purge": "purged", "archive": "archived", "restore": "restored"}[action]
	if err != nil && res != nil && !errors.Is(err, readmodel.ErrBadMark) {
		c.log.ErrorContext(r.Context(), "admin console: "+action+" dead letters", "error", err, "path", r.URL.Path, "done", res.Done)
		c.consoleError(w, r, http.StatusInternalServerError, fmt.Sprintf("Stopped after %d dead letter(s) %s. See the server log, then retry.", res.Done, done))
		return
	}
	if err != nil {
		c.storeFailed(w, r, action+" dead letters", err)
		return
	}
	http.Redirect(w, r, basePath(r)+"/dead-letters?done="+done+"&n="+strconv.Itoa(res.Done), http.StatusSeeOther)
}

package admin

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

// Retry now (issue 25): a message waiting in its transport for its
// backoff is published again at once, under the same ID, from the
// envelope its retry state keeps; the engine's inbox makes whichever copy
// comes second a harmless duplicate. One message (the Why panel, POST
// /api/sagas/{type}/{key}/retries/{id}/retry) or the set a filter selects,
// counted first (the Retrying page, GET /api/retries/select and POST
// /api/retries/retry).

func init() { livePages["retries"] = 3 }

// RetryNowBatch is the body of POST /api/retries/retry?<filter>: it
// retries now the messages the filter selects, once GET
// /api/retries/select?<filter> counted them and answered Digest.
type RetryNowBatch struct {
	// Digest is the selection's, as GET /api/retries/select answered it:
	// the messages are retried only if the filter still selects exactly
	// that set, each at the attempts counted.
	Digest string `json:"digest"`
}

// RetryNowResult is what POST /api/retries/retry did.
type RetryNowResult struct {
	// Done counts the messages published again.
	Done int `json:"done"`
	// Skipped are the messages of the set whose retry state keeps no
	// envelope (recorded before the store kept it): they wait for their
	// next attempt.
	Skipped []string `json:"skipped,omitempty"`
}

// retrySelection is the answer of GET /api/retries/select.
type retrySelection struct {
	Count int `json:"count"`
	*inspect.RetrySelection
}

// errRetryNow is a retry now refused, with the HTTP status to answer and
// a sentence for the operator.
type errRetryNow struct {
	status int
	msg    string
}

func (e *errRetryNow) Error() string { return e.msg }

// unretryable refuses a retry recorded without its message's envelope.
func unretryable(r *store.Retry) error {
	if r.Envelope != nil {
		return nil
	}
	return &errRetryNow{http.StatusConflict, fmt.Sprintf(
		"message %q cannot be retried now: its retry was recorded before the store kept the messages' envelopes; its transport delivers it again at %s",
		r.MessageID, r.NextAttemptAt.UTC().Format(time.RFC3339))}
}

// retryStatus maps retryNow's or findRetry's error to a status and a
// sentence; 0 for none, 503 for a store or queue failure.
func retryStatus(err error) (int, string) {
	var re *errRetryNow
	switch {
	case err == nil:
		return 0, ""
	case errors.As(err, &re):
		return re.status, re.msg
	}
	return http.StatusServiceUnavailable, "the store or the queue failed (see the server log): try again, which is safe"
}

// retryFilter reads a batch's filter from q: saga_type, message_type and,
// when ids is set, id (repeated). Any other parameter is refused, so that
// no filter is silently ignored.
func retryFilter(q url.Values, ids bool) (*inspect.RetryFilter, error) {
	allowed := map[string]bool{"saga_type": true, "message_type": true, "id": ids}
	for name := range q {
		if !allowed[name] {
			return nil, fmt.Errorf("unknown filter %q: filter retries by saga_type and message_type", name)
		}
	}
	f := &inspect.RetryFilter{SagaType: q.Get("saga_type"), MessageType: q.Get("message_type"), IDs: q["id"]}
	for _, v := range append([]string{f.SagaType, f.MessageType}, f.IDs...) {
		if !store.Storable(v) {
			return nil, fmt.Errorf("filter value %.60q is not valid UTF-8 without U+0000", v)
		}
	}
	return f, nil
}

// retriesView is the Retrying page: every retrying message, a page at a
// time, filtered by saga type.
type retriesView struct {
	SagaType string
	Rows     []store.Retry
	// Next is the next page's query; "" on the last page.
	Next    string
	Flash   string
	Problem string
	Now     time.Time
}

// retryAskView is the question asked before a retry now: One for one
// message, else Sel for the set Filter selects.
type retryAskView struct {
	One    *store.Retry
	Back   string
	Sel    *inspect.RetrySelection
	Filter *inspect.RetryFilter
	Now    time.Time
}

// retryCursor reads the Retrying page's cursor: after_at (RFC 3339) and
// after_id.
func retryCursor(q url.Values, rq *store.RetryQuery) error {
	if at := q.Get("after_at"); at != "" {
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return fmt.Errorf("after_at %.40q is not an RFC 3339 time", at)
		}
		rq.AfterFirstFailedAt = t
	}
	rq.AfterID = q.Get("after_id")
	if !store.Storable(rq.AfterID) || !store.Storable(rq.SagaType) {
		return errors.New("the filter or the cursor is not valid UTF-8 without U+0000")
	}
	return nil
}

func (c *console) pageRetries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := &retriesView{SagaType: q.Get("saga_type"), Now: time.Now()}
	if q.Get("done") == "sent" {
		v.Flash = fmt.Sprintf("%d message(s) published again now. Each leaves this list once an engine has applied it (or its transport delivers the earlier copy, a duplicate).", atoi(q.Get("n")))
	}
	rr := c.caps.retries
	if rr == nil {
		v.Problem = "This store keeps no retry state."
		c.render(w, r, http.StatusOK, "retries", "Retrying", v)
		return
	}
	rq := &store.RetryQuery{SagaType: v.SagaType, Limit: consolePage}
	if err := retryCursor(q, rq); err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "That filter or page is not one this console made: "+err.Error()+".")
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	rows, err := rr.QueryRetries(ctx, rq)
	if err != nil {
		c.storeFailed(w, r, "list retries", err)
		return
	}
	v.Rows = rows
	if len(rows) == consolePage {
		last := rows[len(rows)-1]
		v.Next = query("saga_type", v.SagaType, "after_at", last.FirstFailedAt.Format(time.RFC3339Nano), "after_id", last.ID)
	}
	c.render(w, r, http.StatusOK, "retries", "Retrying", v)
}

// formRetry reads the message a retry now form names.
func (c *console) formRetry(vals url.Values) (store.Key, string, error) {
	k, err := c.sagaKeyOfValues(vals.Get("type"), vals.Get("key"))
	return k, vals.Get("id"), err
}

// sagaKeyOfValues is sagaKeyOf for a form's or a query's values.
func (c *console) sagaKeyOfValues(typ, raw string) (store.Key, error) {
	key, err := canonKey(raw, c.e.Config().MaxKeyLen)
	if err != nil {
		return store.Key{}, fmt.Errorf("saga key %q is not a valid key: %w", raw, err)
	}
	return store.Key{SagaType: typ, Key: key}, nil
}

// pageAskRetryNow asks whether to retry now the message the query names.
func (c *console) pageAskRetryNow(w http.ResponseWriter, r *http.Request) {
	if c.readOnly {
		c.consoleError(w, r, http.StatusForbidden, "This console is read-only: nothing can be changed here.")
		return
	}
	q := r.URL.Query()
	k, id, err := c.formRetry(q)
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	rt, err := c.findRetry(ctx, k, id)
	if err == nil {
		err = unretryable(rt)
	}
	if status, msg := retryStatus(err); status == http.StatusServiceUnavailable {
		c.storeFailed(w, r, "find retry", err)
		return
	} else if status != 0 {
		c.consoleError(w, r, status, capitalise(msg)+".")
		return
	}
	c.render(w, r, http.StatusOK, "retrynow", "Retry now", &retryAskView{One: rt, Back: safeNext(q.Get("back")), Now: time.Now()})
}

// actRetryNow retries now the message of the form once it says
// confirm=yes; before that it asks (pageAskRetryNow).
func (c *console) actRetryNow(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	k, id, err := c.formRetry(r.PostForm)
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "That saga key is not a valid key.")
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		ask := query("type", k.SagaType, "key", k.Key, "id", id, "back", safeNext(r.PostFormValue("back")))
		http.Redirect(w, r, basePath(r)+"/retries/retry-now"+ask, http.StatusSeeOther)
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	rt, err := c.findRetry(ctx, k, id)
	if err == nil {
		_, err = c.retryNow(ctx, rt, consoleActor(r))
	}
	if status, msg := retryStatus(err); status == http.StatusServiceUnavailable {
		c.storeFailed(w, r, "retry now", err)
		return
	} else if status != 0 {
		c.consoleError(w, r, status, capitalise(msg)+".")
		return
	}
	back(w, r, "retried")
}

// filterValues is f as a query or a form's hidden fields carry it.
func filterValues(f *inspect.RetryFilter) url.Values {
	v := url.Values{}
	if f.SagaType != "" {
		v.Set("saga_type", f.SagaType)
	}
	if f.MessageType != "" {
		v.Set("message_type", f.MessageType)
	}
	if len(f.IDs) > 0 {
		v["id"] = f.IDs
	}
	return v
}

// pageAskRetryBatch counts the messages the query's filter selects and
// asks whether to retry them now, bound to the count's digest.
func (c *console) pageAskRetryBatch(w http.ResponseWriter, r *http.Request) {
	if c.readOnly {
		c.consoleError(w, r, http.StatusForbidden, "This console is read-only: nothing can be changed here.")
		return
	}
	f, err := retryFilter(r.URL.Query(), true)
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, capitalise(err.Error())+".")
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	sel, err := inspect.SelectRetries(ctx, c.st, f)
	if errors.Is(err, inspect.ErrNoRetryState) {
		c.consoleError(w, r, http.StatusNotImplemented, "This store keeps no retry state.")
		return
	} else if err != nil {
		c.storeFailed(w, r, "count retries", err)
		return
	}
	if sel.Capped {
		c.consoleError(w, r, http.StatusBadRequest, fmt.Sprintf("The filter selects more than %d messages: narrow it.", inspect.MaxBatch))
		return
	}
	c.render(w, r, http.StatusOK, "retrynow", "Retry now", &retryAskView{Sel: sel, Filter: f, Now: time.Now()})
}

// actRetryBatch retries now the set the form's filter selects once the
// form says confirm=yes and carries the digest the question counted;
// before that it asks (pageAskRetryBatch).
func (c *console) actRetryBatch(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "The form could not be read.")
		return
	}
	vals := url.Values{}
	for _, name := range []string{"saga_type", "message_type", "id"} {
		if v := r.PostForm[name]; len(v) > 0 && v[0] != "" {
			vals[name] = v
		}
	}
	f, err := retryFilter(vals, true)
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, capitalise(err.Error())+".")
		return
	}
	if r.PostFormValue("selected") == "yes" && len(f.IDs) == 0 {
		c.consoleError(w, r, http.StatusBadRequest, "No message is ticked: tick the messages to retry, or use Retry all matching.")
		return
	}
	if r.PostFormValue("confirm") != "yes" {
		http.Redirect(w, r, basePath(r)+"/retries/retry?"+filterValues(f).Encode(), http.StatusSeeOther)
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	res, err := c.retryBatch(ctx, f, r.PostFormValue("digest"), consoleActor(r))
	switch {
	case errors.Is(err, inspect.ErrSetChanged):
		c.consoleError(w, r, http.StatusConflict, "The messages this filter selects changed since you counted them (one was applied, failed again or started retrying): nothing was retried. Go back to Retrying and count again.")
	case errors.Is(err, inspect.ErrCapped):
		c.consoleError(w, r, http.StatusBadRequest, fmt.Sprintf("The filter selects more than %d messages: narrow it.", inspect.MaxBatch))
	case errors.Is(err, inspect.ErrNoRetryState):
		c.consoleError(w, r, http.StatusNotImplemented, "This store keeps no retry state.")
	case err != nil:
		c.storeFailed(w, r, "retry now", err)
	default:
		http.Redirect(w, r, basePath(r)+"/retries"+query("saga_type", f.SagaType, "done", "sent", "n", fmt.Sprint(res.Done)), http.StatusSeeOther)
	}
}

// capitalise upper-cases msg's first letter (ASCII).
func capitalise(msg string) string {
	if msg != "" && msg[0] >= 'a' && msg[0] <= 'z' {
		return string(msg[0]-'a'+'A') + msg[1:]
	}
	return msg
}

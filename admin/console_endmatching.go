package admin

import (
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/idemhq/idem/internal/inspect"
)

// batchEndFilter names the instance list's filter parameters, which a
// batch end carries from the list to its question and on to the end.
var batchEndFilter = []string{"type", "state", "status", "prefix", "stuck", "from", "to", "attr"}

// batchEndView is the question of "End all matching…": the filter, the
// count and digest of the set it selects now, and after an end what it
// did.
type batchEndView struct {
	// Filter is the list's filter as query parameters; Query the same as
	// a query string ("?..."), for the links back to the list.
	Filter url.Values
	Query  string
	// Pairs are the filter's parameters to show and to carry in hidden
	// fields, one per value.
	Pairs  []batchEndPair
	Count  int
	Digest string
	// Reason is the form's, carried back when it was refused.
	Reason string
	// Capped: the filter selects more than inspect.MaxBatch; Count is the
	// first MaxBatch, which an end ends, and the next are counted again.
	Capped bool
	// Done, Skipped and Gone are what the end just did (Ended set).
	Ended               bool
	Done, Skipped, Gone int
	// Refused says why the last confirmation ended nothing.
	Refused string
}

// batchEndPair is one filter parameter.
type batchEndPair struct{ Name, Value string }

// batchEndFilterOf reads the list's filter out of values, dropping empty
// parameters (the list's form sends its blank fields).
func batchEndFilterOf(values url.Values) url.Values {
	f := url.Values{}
	for _, k := range batchEndFilter {
		for _, v := range values[k] {
			if v != "" {
				f.Add(k, v)
			}
		}
	}
	return f
}

// pageBatchEnd counts the active sagas the filter selects and asks for a
// reason and a confirmation of that count.
func (c *console) pageBatchEnd(w http.ResponseWriter, r *http.Request) {
	if c.readOnly {
		c.consoleError(w, r, http.StatusForbidden, "This console is read-only: nothing can be changed here.")
		return
	}
	q := r.URL.Query()
	v, ok := c.countBatchEnd(w, r, batchEndFilterOf(q))
	if !ok {
		return
	}
	if d, err := strconv.Atoi(q.Get("done")); err == nil {
		v.Ended, v.Done = true, d
		v.Skipped, _ = strconv.Atoi(q.Get("skipped"))
		v.Gone, _ = strconv.Atoi(q.Get("gone"))
	}
	c.render(w, r, http.StatusOK, "batchend", "End all matching", v)
}

// countBatchEnd selects the set f names, as GET /api/sagas/select does;
// it answers the error page itself when it cannot.
func (c *console) countBatchEnd(w http.ResponseWriter, r *http.Request, f url.Values) (*batchEndView, bool) {
	if len(f) == 0 || (len(f) == 1 && f.Get("status") != "") {
		c.consoleError(w, r, http.StatusBadRequest, "Set a filter first: ending every active saga at once is not offered.")
		return nil, false
	}
	iq, err := c.batchQuery(f)
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "This filter cannot select sagas to end: "+err.Error()+".")
		return nil, false
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	sel, err := inspect.SelectSagas(ctx, c.st, iq)
	if err != nil {
		c.storeFailed(w, r, "select sagas", err)
		return nil, false
	}
	v := &batchEndView{Filter: f, Query: "?" + f.Encode(), Count: len(sel.Sagas), Digest: sel.Digest, Capped: sel.Capped}
	for _, k := range batchEndFilter {
		for _, x := range f[k] {
			v.Pairs = append(v.Pairs, batchEndPair{Name: k, Value: x})
		}
	}
	return v, true
}

// actBatchEnd ends the set the question counted: refused, with nothing
// ended, when the filter selects another set now.
func (c *console) actBatchEnd(w http.ResponseWriter, r *http.Request) {
	_ = r.ParseForm() // a body that does not parse carries no digest: refused below
	f := batchEndFilterOf(r.PostForm)
	digest, reason := r.PostFormValue("digest"), r.PostFormValue("reason")
	if digest == "" || r.PostFormValue("confirm") != "yes" {
		c.consoleError(w, r, http.StatusBadRequest, "The form does not carry the count it confirms: open the instance list and press End all matching again.")
		return
	}
	iq, err := c.batchQuery(f)
	if err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "This filter cannot select sagas to end: "+err.Error()+".")
		return
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	res, err := inspect.EndSagas(ctx, c.st, iq, digest, &inspect.End{Reason: reason, Actor: consoleActor(r), Now: time.Now()})
	switch {
	case errors.Is(err, inspect.ErrSetChanged):
		c.refuseBatchEnd(w, r, f, reason, http.StatusConflict, "Nothing was ended: this confirmation is not a count of this filter ("+err.Error()+"). The filter is counted again below: confirm the new count.")
	case errors.Is(err, inspect.ErrBadReason):
		c.refuseBatchEnd(w, r, f, reason, http.StatusBadRequest, "Nothing was ended: "+err.Error()+".")
	case err != nil && res == nil:
		c.storeFailed(w, r, "end sagas", err)
	case err != nil:
		c.storeFailed(w, r, "end sagas after "+strconv.Itoa(res.Done)+" were ended", err)
	default:
		back := url.Values{}
		for k, vs := range f {
			back[k] = vs
		}
		back.Set("done", strconv.Itoa(res.Done))
		back.Set("skipped", strconv.Itoa(len(res.Skipped)))
		back.Set("gone", strconv.Itoa(res.Gone))
		http.Redirect(w, r, basePath(r)+"/instances/end?"+back.Encode(), http.StatusSeeOther)
	}
}

// refuseBatchEnd answers a refused confirmation with the question again,
// counted anew, keeping the filter and the reason typed, and saying why.
func (c *console) refuseBatchEnd(w http.ResponseWriter, r *http.Request, f url.Values, reason string, status int, why string) {
	v, ok := c.countBatchEnd(w, r, f)
	if !ok {
		return
	}
	v.Reason, v.Refused = reason, why
	c.render(w, r, status, "batchend", "End all matching", v)
}

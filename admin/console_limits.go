package admin

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/idemhq/idem/store"
)

// consoleLimitKeys is how many counters of a limit the console lists,
// the most in flight first.
const consoleLimitKeys = 10

// limitsView is the Limits page: the limits, the form that changes one
// (Edit, from ?edit=), and the question asked before a change (Confirm).
type limitsView struct {
	Rows []limitRow
	// Shares and SharesTotal are LimitList's.
	Shares      []store.ShareWaiting
	SharesTotal int
	Problem     string
	Flash       string
	Edit        *limitRow
	Confirm     *limitConfirm
	// Keys is how many counters of a limit are listed.
	Keys int
}

// limitRow is a limit as the page shows it.
type limitRow struct {
	Limit
	// Known is set when an engine declares the limit or an override
	// holds it: only then can the console change it.
	Known bool
	// The values as text ("none" for nil).
	DeclaredText, OverrideText, InForceText string
	// Shown are the counters listed; More counts those not listed.
	Shown []counterRow
	More  int
	// Form holds the values the change form starts with: those in force.
	Form limitForm
}

// counterRow is a counter as the page lists it.
type counterRow struct {
	LimitCounter
	// AtCap is set when as many are in flight as the cap in force allows.
	AtCap bool
	// Tokens is the bucket's tokens to a tenth; "" without a rate.
	Tokens string
}

// limitForm is the change form's fields as text.
type limitForm struct{ Concurrency, Rate, Burst string }

// limitConfirm is the question before a set or a reset.
type limitConfirm struct {
	// Action is "set" or "reset".
	Action string
	Row    limitRow
	// To is the values after a set, as text, and Form its fields.
	To   string
	Form limitForm
}

// valuesText says what a limit's values allow: "5 at once, 20/s (burst
// 20)", "no limit" when none is set, "none" for nil.
func valuesText(v *LimitValues) string {
	if v == nil {
		return "none"
	}
	var parts []string
	if v.Concurrency > 0 {
		parts = append(parts, fmt.Sprintf("%d at once", v.Concurrency))
	}
	if v.Rate > 0 {
		parts = append(parts, fmt.Sprintf("%s/s (burst %d)", strconv.FormatFloat(v.Rate, 'g', -1, 64), max(v.Burst, 1)))
	}
	if len(parts) == 0 {
		return "no limit"
	}
	return strings.Join(parts, ", ")
}

func toLimitRow(l Limit) limitRow {
	row := limitRow{Limit: l, Known: l.Declared != nil || l.Override != nil, DeclaredText: valuesText(l.Declared),
		OverrideText: valuesText(l.Override), InForceText: valuesText(l.InForce), More: l.CounterCount - len(l.Counters)}
	for _, k := range l.Counters {
		cr := counterRow{LimitCounter: k}
		if f := l.InForce; f != nil {
			cr.AtCap = f.Concurrency > 0 && k.InFlight >= f.Concurrency
			if f.Rate > 0 {
				cr.Tokens = strconv.FormatFloat(k.Tokens, 'f', 1, 64)
			}
		}
		row.Shown = append(row.Shown, cr)
	}
	if f := l.InForce; f != nil {
		row.Form = limitForm{strconv.Itoa(f.Concurrency), strconv.FormatFloat(f.Rate, 'g', -1, 64), strconv.Itoa(f.Burst)}
	}
	return row
}

// limitFlash turns ?done= into a fixed sentence: the query cannot inject
// text of its own.
func limitFlash(done string) string {
	return map[string]string{
		"set":   "Override set: every replica admits under it within one poll of the limits (idem.Config.LimitsInterval, 1 s by default).",
		"reset": "Override removed: the declared values are in force again within one poll of the limits.",
	}[done]
}

func (c *console) pageLimits(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	v := &limitsView{Flash: limitFlash(q.Get("done")), Keys: consoleLimitKeys}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	list, err := c.listLimits(ctx, consoleLimitKeys)
	switch {
	case errors.Is(err, errNoLimits):
		v.Problem = "This store keeps no flow-control limits."
		c.render(w, r, http.StatusOK, "limits", "Limits", v)
		return
	case err != nil:
		c.storeFailed(w, r, "list limits", err)
		return
	}
	for _, l := range list.Limits {
		v.Rows = append(v.Rows, toLimitRow(l))
	}
	v.Shares, v.SharesTotal = list.Shares, list.SharesTotal
	if !c.askLimit(w, r, v, q) {
		return
	}
	c.render(w, r, http.StatusOK, "limits", "Limits", v)
}

// askLimit sets the form (?edit=name) or the question (?confirm=set or
// reset, &name=) of v; it sends an error page and returns false when
// they cannot be shown: read-only, or a name the page does not list as
// changeable.
func (c *console) askLimit(w http.ResponseWriter, r *http.Request, v *limitsView, q url.Values) bool {
	edit, action := q.Get("edit"), q.Get("confirm")
	if edit == "" && action != "set" && action != "reset" {
		return true
	}
	if c.readOnly {
		c.consoleError(w, r, http.StatusForbidden, "This console is read-only: nothing can be changed here.")
		return false
	}
	name := edit
	if edit == "" {
		name = q.Get("name")
	}
	row := v.row(name)
	if row == nil {
		c.consoleError(w, r, http.StatusNotFound, "No engine declares that limit and it has no override: check the name on the Limits page.")
		return false
	}
	if edit != "" {
		v.Edit = row
		return true
	}
	v.Confirm = &limitConfirm{Action: action, Row: *row}
	if action == "reset" {
		return true
	}
	ch, field := formChange(q)
	if field != "" {
		c.consoleError(w, r, http.StatusBadRequest, "The "+field+" is not a number of 0 or more: give a whole number (a decimal one for the rate), 0 for none.")
		return false
	}
	to := merged(name, store.Limit{}, ch) // the form gives every value
	if err := to.Validate(); err != nil {
		c.consoleError(w, r, http.StatusBadRequest, "The "+limitField(err)+" is not a number of 0 or more: give a whole number (a decimal one for the rate), 0 for none.")
		return false
	}
	v.Confirm.To = valuesText(&LimitValues{Concurrency: to.Concurrency, Rate: to.Rate, Burst: to.Burst})
	v.Confirm.Form = limitForm{strconv.Itoa(to.Concurrency), strconv.FormatFloat(to.Rate, 'g', -1, 64), strconv.Itoa(to.Burst)}
	return true
}

// row is the changeable row named name, or nil.
func (v *limitsView) row(name string) *limitRow {
	for i := range v.Rows {
		if v.Rows[i].Name == name && v.Rows[i].Known {
			return &v.Rows[i]
		}
	}
	return nil
}

// formChange reads the change form's concurrency, rate and burst (empty:
// 0); the second result names the field that is not a number.
func formChange(f url.Values) (*LimitChange, string) {
	ch := &LimitChange{}
	atoi := func(name string, p **int) bool {
		n, err := strconv.Atoi(cmp.Or(strings.TrimSpace(f.Get(name)), "0"))
		*p = &n
		return err == nil
	}
	if !atoi("concurrency", &ch.Concurrency) {
		return nil, "concurrency"
	}
	rate, err := strconv.ParseFloat(cmp.Or(strings.TrimSpace(f.Get("rate")), "0"), 64)
	if err != nil {
		return nil, "rate"
	}
	ch.Rate = &rate
	if !atoi("burst", &ch.Burst) {
		return nil, "burst"
	}
	return ch, ""
}

// actSetLimit sets the override the form gives, once it says confirm=yes;
// before that it asks, on the Limits page.
func (c *console) actSetLimit(w http.ResponseWriter, r *http.Request) {
	c.actLimit(w, r, "set")
}

// actResetLimit removes the override of the form's limit, once it says
// confirm=yes; before that it asks, on the Limits page.
func (c *console) actResetLimit(w http.ResponseWriter, r *http.Request) {
	c.actLimit(w, r, "reset")
}

func (c *console) actLimit(w http.ResponseWriter, r *http.Request, action string) {
	name := r.PostFormValue("name")
	if r.PostFormValue("confirm") != "yes" {
		to := "/limits" + query("confirm", action, "name", name)
		if action == "set" {
			to = "/limits" + query("confirm", action, "name", name, "concurrency", r.PostFormValue("concurrency"), "rate", r.PostFormValue("rate"), "burst", r.PostFormValue("burst"))
		}
		http.Redirect(w, r, basePath(r)+to, http.StatusSeeOther)
		return
	}
	ch := &limitChange{name: name, reset: action == "reset", actor: consoleActor(r)}
	if action == "set" {
		set, field := formChange(r.PostForm)
		if field != "" {
			c.consoleError(w, r, http.StatusBadRequest, "The "+field+" is not a number of 0 or more: give a whole number (a decimal one for the rate), 0 for none.")
			return
		}
		ch.set = *set
	}
	ctx, cancel := c.storeCtx(r)
	defer cancel()
	_, err := c.changeLimit(ctx, ch, 0)
	switch {
	case errors.Is(err, errNoLimits):
		c.consoleError(w, r, http.StatusNotImplemented, "This store keeps no flow-control limits.")
	case errors.Is(err, errUnknownLimit):
		c.consoleError(w, r, http.StatusNotFound, "No engine declares that limit and it has no override: check the name on the Limits page.")
	case errors.Is(err, store.ErrRejected):
		c.consoleError(w, r, http.StatusBadRequest, "The "+cmp.Or(limitField(err), "value")+" is refused: a name is 1 to 200 bytes of UTF-8 without NUL; numbers are 0 or more, 0 for none.")
	case err != nil:
		c.storeFailed(w, r, action+" limit", err)
	default:
		http.Redirect(w, r, basePath(r)+"/limits"+query("done", action), http.StatusSeeOther)
	}
}

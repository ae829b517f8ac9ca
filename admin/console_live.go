package admin

import (
	"errors"
	"fmt"
	"html"
	"html/template"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// Live updates, counts, paging both ways, time ranges and the time
// toggle of the console's lists (issue 25, items 5 and 7).

// livePages is how often, in seconds, each live page re-fetches itself
// (console.js swaps the new <main> in unless the operator is busy there).
var livePages = map[string]int{
	"overview": 2, "sagas": 5, "instances": 3, "instance": 3, "deadletters": 3,
	"deadletter": 3, "timers": 3, "schedules": 5, "replicas": 5, "limits": 3,
}

// livePage is the refresh period of page in seconds; 0 for a page that is
// not live (a form, an error).
func livePage(page string) int { return livePages[page] }

// timeLayout is the console's absolute time: UTC, to the second.
const timeLayout = "2006-01-02 15:04:05 MST"

// timeTag renders t as a <time> element holding both forms, relative to
// now and absolute in UTC; the layout's toggle shows one (the relative one
// without JavaScript, the absolute one then in the title). The zero time
// renders as a dash. Only formatted times go in, escaped all the same.
func timeTag(t, now time.Time) template.HTML {
	if t.IsZero() {
		return "—"
	}
	abs := html.EscapeString(t.UTC().Format(timeLayout))
	return template.HTML(`<time datetime="` + html.EscapeString(t.UTC().Format(time.RFC3339Nano)) + `" title="` + abs + `"><span class="t-rel">` +
		html.EscapeString(agoAt(t, now)) + `</span><span class="t-abs">` + abs + `</span></time>`)
}

// countText says how many a list's filters select, as "1,234" or "more
// than 10,000 (about 1,200,000)".
func countText(c readmodel.Count) string {
	if c.Exact {
		return thousands(c.N)
	}
	s := "more than " + thousands(c.N)
	if c.Estimate > c.N {
		s += " (about " + thousands(c.Estimate) + ")"
	}
	return s
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// The forms a time filter accepts: the browser's datetime-local (read as
// UTC), RFC 3339, or a date.
var rangeLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano, "2006-01-02"}

// formLayout is how a time filter goes back into its datetime-local
// field: as the browser writes it, without seconds when they are zero
// (else the field's value differs from the one the page came with, and
// the page reads as edited: console.js would not refresh it).
const formLayout, formLayoutMinutes = "2006-01-02T15:04:05", "2006-01-02T15:04"

// timeRange reads the [from, to) filter of the query parameters named
// from and to; what names the field in the error (as "Updated").
func timeRange(q url.Values, what string) (from, to time.Time, err error) {
	parse := func(name, label string) (time.Time, error) {
		v := q.Get(name)
		if v == "" {
			return time.Time{}, nil
		}
		for _, l := range rangeLayouts {
			if t, err := time.Parse(l, v); err == nil {
				return t.UTC(), nil
			}
		}
		return time.Time{}, fmt.Errorf("%s %s: %q is not a time: give it as 2026-11-26T08:00 (UTC) or in RFC 3339", what, label, shorten(strings.ToValidUTF8(v, "\uFFFD"), 40))
	}
	if from, err = parse("from", "from"); err != nil {
		return from, to, err
	}
	if to, err = parse("to", "before"); err != nil {
		return from, to, err
	}
	if !from.IsZero() && !to.IsZero() && !from.Before(to) {
		return from, to, fmt.Errorf("%s: the range from %s to %s is empty: the end must come after the start", what, from.Format(timeLayout), to.Format(timeLayout))
	}
	return from, to, nil
}

// formTime is t as its datetime-local field shows it ("" for zero).
func formTime(t time.Time) string {
	switch {
	case t.IsZero():
		return ""
	case t.Second() == 0:
		return t.UTC().Format(formLayoutMinutes)
	}
	return t.UTC().Format(formLayout)
}

// pager is the count and the links of a list page.
type pager struct {
	// Count is nil when the store cannot count the list's filters.
	Count *readmodel.Count
	// PrevQuery and NextQuery are query strings ("?..."), "" when there is
	// no such page; FirstQuery is set on a page past the end.
	PrevQuery, NextQuery, FirstQuery string
}

// pageLinks sets the links of a page from its filters (every parameter
// kept but the cursors), the cursors of its first and last rows ("" when
// it is empty), and whether rows exist before and after it. An empty
// page reached through a cursor links to the first page.
func (p *pager) pageLinks(filters url.Values, first, last string, hasPrev, hasNext bool) {
	link := func(k, v string) string {
		q := url.Values{}
		for name, vs := range filters {
			if name != "after" && name != "before" {
				q[name] = vs
			}
		}
		if k != "" {
			q.Set(k, v)
		}
		return "?" + q.Encode()
	}
	if first == "" {
		if hasPrev {
			p.FirstQuery = link("", "")
		}
		return
	}
	if hasPrev {
		p.PrevQuery = link("before", first)
	}
	if hasNext {
		p.NextQuery = link("after", last)
	}
}

// trimPage cuts a page read with one row more than limit to limit rows,
// and says which neighbours exist: a page read forwards has one after it
// when the extra row came, and one before it when it started at a
// cursor; read backwards, the other way round.
func trimPage[T any](rows []T, limit int, backward, cursor bool) (page []T, hasPrev, hasNext bool) {
	extra := len(rows) > limit
	switch {
	case backward && extra:
		return rows[1:], true, true
	case backward:
		return rows, false, true
	case extra:
		return rows[:limit], cursor, true
	}
	return rows, cursor, false
}

// errBothCursors is the console's answer to a query with both cursors.
var errBothCursors = errors.New("give either after or before, not both")

// liveInstanceQuery adds the time range and the backward cursor of the
// query parameters to p.
func liveInstanceQuery(q url.Values, p *readmodel.InstanceQuery) error {
	var err error
	if p.UpdatedFrom, p.UpdatedBefore, err = timeRange(q, "Updated"); err != nil {
		return err
	}
	if b := q.Get("before"); b != "" {
		if p.After != nil {
			return errBothCursors
		}
		if p.Before, err = decodeCursor(b); err != nil {
			return fmt.Errorf("before: %w", err)
		}
	}
	return nil
}

// instanceRows is a page of instances, its neighbours and its count.
type instanceRows struct {
	Rows             []*store.Instance
	HasPrev, HasNext bool
	Count            *readmodel.Count
}

// instanceLinks sets the rows and the pager of an instance page.
func (v *instancesView) instanceLinks(p *readmodel.InstanceQuery, page *instanceRows) {
	v.Rows, v.Count = page.Rows, page.Count
	v.Filter["from"], v.Filter["to"] = formTime(p.UpdatedFrom), formTime(p.UpdatedBefore)
	filters := url.Values{"attr": v.Attrs}
	for k, f := range v.Filter {
		if f != "" {
			filters.Set(k, f)
		}
	}
	var first, last string
	if len(v.Rows) > 0 {
		first, last = encodeCursor(v.Rows[0]), encodeCursor(v.Rows[len(v.Rows)-1])
	}
	v.pageLinks(filters, first, last, page.HasPrev, page.HasNext)
	if v.NextQuery != "" {
		v.Next = last
	}
}

// timerQuery turns the timers page's parameters into a readmodel.TimerQuery:
// overdue bounds the range at now.
func timerQuery(q url.Values, from, to, now time.Time) (*readmodel.TimerQuery, error) {
	var err error
	p := &readmodel.TimerQuery{SagaType: q.Get("type"), DueFrom: from, DueBefore: to, Limit: consolePage}
	if q.Get("overdue") != "" && (to.IsZero() || now.Before(to)) {
		p.DueBefore = now
	}
	if a, b := q.Get("after"), q.Get("before"); a != "" && b != "" {
		return nil, errBothCursors
	}
	if p.After, err = inspect.ParseTimerCursor(q.Get("after")); err != nil {
		return nil, fmt.Errorf("after: %w", err)
	}
	if p.Before, err = inspect.ParseTimerCursor(q.Get("before")); err != nil {
		return nil, fmt.Errorf("before: %w", err)
	}
	return p, nil
}

// timerLinks sets the pager of a timers page.
func (v *timersView) timerLinks(ts []store.Timer, hasPrev, hasNext bool) {
	filters := url.Values{}
	for k, f := range v.Filter {
		if f != "" {
			filters.Set(k, f)
		}
	}
	var first, last string
	if len(ts) > 0 {
		first, last = inspect.TimerCursor(&ts[0]), inspect.TimerCursor(&ts[len(ts)-1])
	}
	v.pageLinks(filters, first, last, hasPrev, hasNext)
}

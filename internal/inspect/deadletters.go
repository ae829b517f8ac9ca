package inspect

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// DeadLetterFilter selects dead letters. Empty fields select everything.
type DeadLetterFilter struct {
	// SagaType is the saga type the dead letter was recorded for.
	SagaType string
	// Reason is the machine-readable reason ("malformed_body", ...).
	Reason string
	// MessageType is the envelope's type.
	MessageType string
	// Key is the saga key.
	Key string
	// AsOf, when set, is the mark of a count (ReasonCounts.AsOf): only the dead
	// letters counted then are selected, not one recorded, or recorded
	// again, since.
	AsOf string
	// State selects by the latest replay; "" is store.DeadLettersUnresolved
	// (a dead letter whose replay succeeded or is pending is not selected,
	// so that a bulk replay does not run its message again), and
	// store.DeadLettersAll selects every one.
	State store.DeadLetterState
	// Fingerprint, Archived and ArchivedBefore select as the fields of
	// readmodel.DeadLetterQuery do: by default, archived dead letters are
	// left out.
	Fingerprint    string
	Archived       readmodel.ArchivedFilter
	ArchivedBefore time.Time
}

// state is f's state, unresolved by default.
func (f *DeadLetterFilter) state() store.DeadLetterState {
	if f.State == "" {
		return store.DeadLettersUnresolved
	}
	return f.State
}

// Match reports whether d passes every filter.
func (f *DeadLetterFilter) Match(d *store.DeadLetter) bool {
	return (f.SagaType == "" || d.SagaType == f.SagaType) && (f.Reason == "" || d.Reason == f.Reason) &&
		(f.MessageType == "" || d.Envelope.Type == f.MessageType) && (f.Key == "" || d.Key == f.Key) &&
		f.state().Selects(d.State()) && f.query("", 0).SelectsTriage(d)
}

// EachDeadLetter calls fn with every page of dead letters f selects, in ID
// order. A page is listed before fn runs and the next starts after its
// last ID, so fn may delete or replay what it gets.
func EachDeadLetter(ctx context.Context, st store.Store, f *DeadLetterFilter, fn func([]store.DeadLetter) error) error {
	after := ""
	for {
		ds, err := listDeadLetters(ctx, st, f, after, page)
		if err != nil {
			return err
		}
		if len(ds) == 0 {
			return nil
		}
		after = ds[len(ds)-1].ID
		match := ds[:0:0]
		for i := range ds {
			if f.Match(&ds[i]) {
				match = append(match, ds[i])
			}
		}
		if len(match) > 0 {
			if err := fn(match); err != nil {
				return err
			}
		}
		if len(ds) < page {
			return nil
		}
	}
}

// DeadLetters returns one page of the dead letters f selects after the ID
// after, and the cursor of the next page ("" when none). A store that
// filters (readmodel.DeadLetterQuerier) answers in one query unless f names a
// message type the store cannot select (readmodel.DeadLetterTypeQuerier; it is
// then matched here, from the envelope); otherwise at most MaxScan dead
// letters are read to fill the page.
func DeadLetters(ctx context.Context, st store.Store, f *DeadLetterFilter, after string, limit int) ([]store.DeadLetter, string, error) {
	limit = cmp.Or(limit, 100)
	n := page
	if _, ok := st.(readmodel.DeadLetterQuerier); ok && selectsAll(st, f) {
		n = limit // every row the store returns matches
	}
	var out []store.DeadLetter
	for read := 0; read < MaxScan; read += n {
		ds, err := listDeadLetters(ctx, st, f, after, n)
		if err != nil {
			return nil, "", err
		}
		for i := range ds {
			if f.Match(&ds[i]) {
				out = append(out, ds[i])
				if len(out) == limit {
					return out, ds[i].ID, nil
				}
			}
		}
		if len(ds) < n {
			return out, "", nil
		}
		after = ds[len(ds)-1].ID
	}
	return out, after, nil
}

// ReasonCount is how many dead letters have one reason.
type ReasonCount struct {
	Reason string `json:"reason"`
	Count  int    `json:"count"`
}

// ReasonCounts is what CountByReason returns.
type ReasonCounts struct {
	// ByReason is most frequent first.
	ByReason []ReasonCount
	Total    int
	// Exact is false when more dead letters exist than were counted.
	Exact bool
	// AsOf is the mark of the count, to pass as DeadLetterFilter.AsOf so
	// that an action confirmed on this count acts on exactly what was
	// counted; "" when the store cannot bind one (no
	// readmodel.DeadLetterQuerier).
	AsOf string
}

// CountByReason counts the dead letters f selects by reason, most frequent
// first, with the mark of the count: the store counts them in one query
// (readmodel.DeadLetterQuerier) and this function reads only the dead letters
// of its reasons when f names a message type it cannot select (matched
// here, from the envelope); a store without it has at most MaxScan dead
// letters read.
func CountByReason(ctx context.Context, st store.Store, f *DeadLetterFilter) (*ReasonCounts, error) {
	dq, ok := st.(readmodel.DeadLetterQuerier)
	if !ok {
		return scanCounts(ctx, st, f)
	}
	c, err := dq.CountDeadLetters(ctx, f.query("", 0))
	if err != nil {
		return nil, fmt.Errorf("count dead letters: %w", err)
	}
	out := &ReasonCounts{Exact: true, AsOf: c.AsOf}
	if selectsAll(st, f) {
		out.ByReason, out.Total = sortCounts(c.ByReason)
		return out, nil
	}
	m := map[string]int{}
	bound := *f
	bound.AsOf = c.AsOf
	err = EachDeadLetter(ctx, st, &bound, func(ds []store.DeadLetter) error {
		for i := range ds {
			m[ds[i].Reason]++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out.ByReason, out.Total = sortCounts(m)
	return out, nil
}

// scanCounts counts by reading at most MaxScan dead letters.
func scanCounts(ctx context.Context, st store.Store, f *DeadLetterFilter) (*ReasonCounts, error) {
	m := map[string]int{}
	out := &ReasonCounts{}
	after := ""
	for read := 0; read < MaxScan; read += page {
		ds, err := listDeadLetters(ctx, st, f, after, page)
		if err != nil {
			return nil, err
		}
		for i := range ds {
			if f.Match(&ds[i]) {
				m[ds[i].Reason]++
			}
		}
		if len(ds) < page {
			out.Exact = true
			break
		}
		after = ds[len(ds)-1].ID
	}
	out.ByReason, out.Total = sortCounts(m)
	return out, nil
}

// DeleteDeadLetters deletes the dead letters ds (selected with f) as of
// f.AsOf: one recorded again since is kept.
func DeleteDeadLetters(ctx context.Context, st store.Store, f *DeadLetterFilter, ds []store.DeadLetter) (int, error) {
	ids := make([]string, len(ds))
	for i := range ds {
		ids[i] = ds[i].ID
	}
	if dq, ok := st.(readmodel.DeadLetterQuerier); ok {
		n, err := dq.DeleteDeadLettersAsOf(ctx, ids, f.AsOf)
		if err != nil {
			return n, fmt.Errorf("delete %d dead letters: %w", len(ids), err)
		}
		return n, nil
	}
	n, err := st.DeleteDeadLetters(ctx, ids)
	if err != nil {
		return n, fmt.Errorf("delete %d dead letters: %w", len(ids), err)
	}
	return n, nil
}

// sortCounts lists m most frequent first, and sums it.
func sortCounts(m map[string]int) (counts []ReasonCount, total int) {
	for r, n := range m {
		counts = append(counts, ReasonCount{Reason: r, Count: n})
		total += n
	}
	slices.SortFunc(counts, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Reason, b.Reason))
	})
	return counts, total
}

// query is f as a readmodel.DeadLetterQuery.
func (f *DeadLetterFilter) query(after string, limit int) *readmodel.DeadLetterQuery {
	return &readmodel.DeadLetterQuery{SagaType: f.SagaType, Key: f.Key, Reason: f.Reason, MessageType: f.MessageType, AsOf: f.AsOf, State: f.state(), After: after, Limit: limit,
		Fingerprint: f.Fingerprint, Archived: f.Archived, ArchivedBefore: f.ArchivedBefore}
}

// listDeadLetters reads one page of dead letters after the ID after: those
// of f's saga type, key and reason when the store filters
// (readmodel.DeadLetterQuerier), else those of f's saga type; the caller
// filters the rest with f.Match.
func listDeadLetters(ctx context.Context, st store.Store, f *DeadLetterFilter, after string, limit int) ([]store.DeadLetter, error) {
	if dq, ok := st.(readmodel.DeadLetterQuerier); ok {
		ds, err := dq.QueryDeadLetters(ctx, f.query(after, limit))
		if err != nil {
			return nil, fmt.Errorf("query dead letters: %w", err)
		}
		return ds, nil
	}
	ds, err := st.ListDeadLetters(ctx, &store.ListParams{SagaType: f.SagaType, After: after, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	return ds, nil
}

// selectsAll reports whether st selects by every filter of f in the
// database: f names no message type, or st selects by it
// (readmodel.DeadLetterTypeQuerier).
func selectsAll(st store.Store, f *DeadLetterFilter) bool {
	return readmodel.SelectsMessageType(st) || f.MessageType == ""
}

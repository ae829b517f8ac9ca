package inspect

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/idemhq/idem/store"
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
}

// Match reports whether d passes every filter.
func (f *DeadLetterFilter) Match(d *store.DeadLetter) bool {
	return (f.SagaType == "" || d.SagaType == f.SagaType) && (f.Reason == "" || d.Reason == f.Reason) &&
		(f.MessageType == "" || d.Envelope.Type == f.MessageType) && (f.Key == "" || d.Key == f.Key)
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
// filters (store.DeadLetterQuerier) answers in one query unless f names a
// message type (matched here, from the envelope); otherwise at most
// MaxScan dead letters are read to fill the page.
func DeadLetters(ctx context.Context, st store.Store, f *DeadLetterFilter, after string, limit int) ([]store.DeadLetter, string, error) {
	limit = cmp.Or(limit, 100)
	n := page
	if _, ok := st.(store.DeadLetterQuerier); ok && f.MessageType == "" {
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

// CountByReason counts the dead letters f selects by reason, most frequent
// first: in one query when the store filters (store.DeadLetterQuerier)
// and f names no message type, otherwise by reading at most MaxScan dead
// letters; exact is then false when there were more.
func CountByReason(ctx context.Context, st store.Store, f *DeadLetterFilter) (counts []ReasonCount, total int, exact bool, err error) {
	if dq, ok := st.(store.DeadLetterQuerier); ok && f.MessageType == "" {
		m, err := dq.CountDeadLetters(ctx, f.query("", 0))
		if err != nil {
			return nil, 0, false, fmt.Errorf("count dead letters: %w", err)
		}
		counts, total = sortCounts(m)
		return counts, total, true, nil
	}
	m := map[string]int{}
	after := ""
	for read := 0; ; read += page {
		if read >= MaxScan {
			break
		}
		ds, err := listDeadLetters(ctx, st, f, after, page)
		if err != nil {
			return nil, 0, false, err
		}
		for i := range ds {
			if f.Match(&ds[i]) {
				m[ds[i].Reason]++
			}
		}
		if len(ds) < page {
			exact = true
			break
		}
		after = ds[len(ds)-1].ID
	}
	counts, total = sortCounts(m)
	return counts, total, exact, nil
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

// query is f as a store.DeadLetterQuery.
func (f *DeadLetterFilter) query(after string, limit int) *store.DeadLetterQuery {
	return &store.DeadLetterQuery{SagaType: f.SagaType, Key: f.Key, Reason: f.Reason, After: after, Limit: limit}
}

// listDeadLetters reads one page of dead letters after the ID after: those
// of f's saga type, key and reason when the store filters
// (store.DeadLetterQuerier), else those of f's saga type; the caller
// filters the rest with f.Match.
func listDeadLetters(ctx context.Context, st store.Store, f *DeadLetterFilter, after string, limit int) ([]store.DeadLetter, error) {
	if dq, ok := st.(store.DeadLetterQuerier); ok {
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

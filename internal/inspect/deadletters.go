package inspect

import (
	"cmp"
	"context"
	"errors"
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
		ds, err := st.ListDeadLetters(ctx, &store.ListParams{SagaType: f.SagaType, After: after, Limit: page})
		if err != nil {
			return fmt.Errorf("list dead letters: %w", err)
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
// after, and the cursor of the next page ("" when none). It reads at most
// MaxScan dead letters to fill the page.
func DeadLetters(ctx context.Context, st store.Store, f *DeadLetterFilter, after string, limit int) ([]store.DeadLetter, string, error) {
	limit = cmp.Or(limit, 100)
	var out []store.DeadLetter
	for read := 0; read < MaxScan; read += page {
		ds, err := st.ListDeadLetters(ctx, &store.ListParams{SagaType: f.SagaType, After: after, Limit: page})
		if err != nil {
			return nil, "", fmt.Errorf("list dead letters: %w", err)
		}
		for i := range ds {
			if f.Match(&ds[i]) {
				out = append(out, ds[i])
				if len(out) == limit {
					return out, ds[i].ID, nil
				}
			}
		}
		if len(ds) < page {
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
// first. exact is false when more than MaxScan were read.
func CountByReason(ctx context.Context, st store.Store, f *DeadLetterFilter) (counts []ReasonCount, total int, exact bool, err error) {
	m := map[string]int{}
	errStop := errors.New("stop")
	err = EachDeadLetter(ctx, st, f, func(ds []store.DeadLetter) error {
		for i := range ds {
			m[ds[i].Reason]++
			total++
		}
		if total >= MaxScan {
			return errStop
		}
		return nil
	})
	exact = err == nil
	if err != nil && !errors.Is(err, errStop) {
		return nil, 0, false, err
	}
	for r, n := range m {
		counts = append(counts, ReasonCount{Reason: r, Count: n})
	}
	slices.SortFunc(counts, func(a, b ReasonCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Reason, b.Reason))
	})
	return counts, total, exact, nil
}

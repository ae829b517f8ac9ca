package inspect

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
)

// TimerFilter selects timers. Empty fields select everything.
type TimerFilter struct {
	SagaType string
	Key      string
	// DueBefore, when set, selects timers due before it (overdue ones when
	// it is now).
	DueBefore time.Time
	// After is the cursor of the page: TimerCursor of the previous page's
	// last timer.
	After string
	// Limit bounds the page; 0 means 100.
	Limit int
}

// Timers returns one page of the timers f selects, in due order, and the
// cursor of the next page ("" when there is none). A filter on a key is
// answered by store.Store.TimersOf, through the store's index, however many
// other timers there are; without one, it reads at most MaxScan timers to
// fill the page.
func Timers(ctx context.Context, st store.Store, f *TimerFilter) ([]store.Timer, string, error) {
	limit := cmp.Or(f.Limit, 100)
	if f.Key != "" {
		return sagaTimers(ctx, st, f, limit)
	}
	after, err := parseTimerCursor(f.After)
	if err != nil {
		return nil, "", err
	}
	p := &store.ListParams{SagaType: f.SagaType, After: after, Limit: page}
	var out []store.Timer
	for read := 0; read < timerScan; read += page {
		ts, err := st.ListTimers(ctx, p)
		if err != nil {
			return nil, "", fmt.Errorf("list timers: %w", err)
		}
		for i := range ts {
			t := &ts[i]
			if !f.DueBefore.IsZero() && !t.DueAt.Before(f.DueBefore) {
				return out, "", nil // due order: none later matches
			}
			out = append(out, *t)
			if len(out) == limit {
				return out, TimerCursor(t), nil
			}
		}
		if len(ts) < page {
			return out, "", nil
		}
		p.After = timerListAfter(&ts[len(ts)-1])
	}
	if len(out) > 0 {
		return out, TimerCursor(&out[len(out)-1]), nil
	}
	return out, "", nil
}

// FindTimer returns the timer k, or an error wrapping store.ErrNotFound.
func FindTimer(ctx context.Context, st store.Store, k store.TimerKey) (*store.Timer, error) {
	if k.SagaType == "" {
		return nil, fmt.Errorf("timer %s/%s/%s: no saga type: %w", k.SagaType, k.Key, k.Name, store.ErrNotFound)
	}
	ts, err := st.TimersOf(ctx, store.Key{SagaType: k.SagaType, Key: k.Key})
	if err != nil {
		return nil, fmt.Errorf("find timer %s/%s/%s: %w", k.SagaType, k.Key, k.Name, err)
	}
	for i := range ts {
		if ts[i].Name == k.Name {
			return &ts[i], nil
		}
	}
	return nil, fmt.Errorf("timer %s/%s/%s: %w", k.SagaType, k.Key, k.Name, store.ErrNotFound)
}

// CancelTimer deletes timer k so that it never fires. The saga's state is
// left as it is: the saga sees no timeout. A missing timer is an error
// wrapping store.ErrNotFound.
func CancelTimer(ctx context.Context, st store.Store, k store.TimerKey) error {
	if _, err := FindTimer(ctx, st, k); err != nil {
		return err
	}
	return commit(ctx, st, &store.Changes{CancelTimers: []store.TimerKey{k}}, "cancel timer "+k.SagaType+"/"+k.Key+"/"+k.Name)
}

// RescheduleTimer moves timer k to due, keeping its envelope, so that the
// saga still recognises it when it fires. A missing timer is an error
// wrapping store.ErrNotFound.
func RescheduleTimer(ctx context.Context, st store.Store, k store.TimerKey, due time.Time) (*store.Timer, error) {
	t, err := FindTimer(ctx, st, k)
	if err != nil {
		return nil, err
	}
	t.DueAt = due.UTC().Truncate(time.Microsecond)
	if err := commit(ctx, st, &store.Changes{Timers: []store.Timer{*t}}, "reschedule timer "+k.SagaType+"/"+k.Key+"/"+k.Name); err != nil {
		return nil, err
	}
	return t, nil
}

func commit(ctx context.Context, st store.Store, c *store.Changes, op string) error {
	uow, err := st.Begin(ctx)
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	if err := uow.Commit(ctx, c); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return nil
}

// sagaTimers is Timers for the timers of one key (in one saga type, or in
// every type when f.SagaType is empty): the store returns them all, and the
// page is cut from them here.
func sagaTimers(ctx context.Context, st store.Store, f *TimerFilter, limit int) ([]store.Timer, string, error) {
	ts, err := st.TimersOf(ctx, store.Key{SagaType: f.SagaType, Key: f.Key})
	if err != nil {
		return nil, "", fmt.Errorf("list timers: %w", err)
	}
	after, err := timerAfter(f.After)
	if err != nil {
		return nil, "", err
	}
	out := ts[:0]
	for _, t := range ts {
		if (f.DueBefore.IsZero() || t.DueAt.Before(f.DueBefore)) && (after == nil || sqlq.CompareTimers(t, *after) > 0) {
			out = append(out, t)
		}
	}
	if len(out) > limit {
		return out[:limit], TimerCursor(&out[limit-1]), nil
	}
	return out, "", nil
}

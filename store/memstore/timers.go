package memstore

import (
	"cmp"
	"context"
	"slices"

	"github.com/idemhq/idem/store"
)

// TimersOf returns the timers of saga k in (DueAt, Name) order, or with an
// empty k.SagaType those of key k.Key in every saga type, in (DueAt,
// SagaType, Name) order. A saga's timers are one map lookup; a key in
// every type visits each saga that has timers, in memory.
func (s *Store) TimersOf(ctx context.Context, k store.Key) ([]store.Timer, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "timers of saga "+k.SagaType+"/"+k.Key); err != nil {
		return nil, err
	}
	var out []store.Timer
	if k.Key == "" {
		return nil, nil
	}
	add := func(byName map[string]*timerRow) {
		for _, row := range byName {
			out = append(out, cloneTimer(row.timer))
		}
	}
	if k.SagaType != "" {
		add(s.timers[k])
	} else {
		for sk, byName := range s.timers {
			if sk.Key == k.Key {
				add(byName)
			}
		}
	}
	slices.SortFunc(out, func(a, b store.Timer) int {
		return cmp.Or(a.DueAt.Compare(b.DueAt), cmp.Compare(a.SagaType, b.SagaType), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

package memstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var (
	_ readmodel.TimerQuerier = (*Store)(nil)
	_ readmodel.QueryCounter = (*Store)(nil)
)

// QueryTimers returns one page of the timers p selects; see
// readmodel.TimerQuerier.
func (s *Store) QueryTimers(ctx context.Context, p *readmodel.TimerQuery) ([]store.Timer, error) {
	if p == nil {
		p = &readmodel.TimerQuery{}
	}
	if p.After != nil && p.Before != nil {
		return nil, fmt.Errorf("memstore: query timers: %w", readmodel.ErrBothCursors)
	}
	cursor, side := p.After, 1
	if p.Before != nil {
		cursor, side = p.Before, -1
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "query timers"); err != nil {
		return nil, err
	}
	var list []*store.Timer
	for _, t := range s.matchingTimers(p) {
		if cursor != nil && compareTimers(t, &store.Timer{DueAt: cursor.DueAt, SagaType: cursor.SagaType, Key: cursor.Key, Name: cursor.Name})*side <= 0 {
			continue
		}
		list = append(list, t)
	}
	slices.SortFunc(list, compareTimers)
	if n := limit(p.Limit); side < 0 {
		list = list[max(0, len(list)-n):]
	} else {
		list = list[:min(len(list), n)]
	}
	out := make([]store.Timer, len(list))
	for i, t := range list {
		out[i] = cloneTimer(*t)
	}
	return out, nil
}

// matchingTimers returns the timers p's filters select, unordered; the
// caller holds s.mu.
func (s *Store) matchingTimers(p *readmodel.TimerQuery) []*store.Timer {
	var out []*store.Timer
	for k, byName := range s.timers {
		if p.SagaType != "" && k.SagaType != p.SagaType {
			continue
		}
		for _, row := range byName {
			t := &row.timer
			if (p.DueFrom.IsZero() || !t.DueAt.Before(p.DueFrom)) && (p.DueBefore.IsZero() || t.DueAt.Before(p.DueBefore)) {
				out = append(out, t)
			}
		}
	}
	return out
}

// CountInstanceQuery counts the instances p selects, up to bound; see
// readmodel.QueryCounter. Memory holds no estimate: above the bound, the
// count says only "more than bound".
func (s *Store) CountInstanceQuery(ctx context.Context, p *readmodel.InstanceQuery, bound int) (readmodel.Count, error) {
	if p == nil {
		p = &readmodel.InstanceQuery{}
	}
	attrs, ok := canon.AttributeFilter(p.Attributes)
	if !ok {
		return readmodel.Count{Exact: true}, nil
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "count instances"); err != nil {
		return readmodel.Count{}, err
	}
	n := 0
	for _, in := range s.instances {
		if matches(p, in) && hasAttributes(in, attrs) {
			if n++; n > bound {
				break
			}
		}
	}
	return readmodel.BoundedCount(n, bound), nil
}

// CountTimerQuery counts the timers p selects, up to bound; see
// readmodel.QueryCounter.
func (s *Store) CountTimerQuery(ctx context.Context, p *readmodel.TimerQuery, bound int) (readmodel.Count, error) {
	if p == nil {
		p = &readmodel.TimerQuery{}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "count timers"); err != nil {
		return readmodel.Count{}, err
	}
	return readmodel.BoundedCount(len(s.matchingTimers(p)), bound), nil
}

package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.InstanceQuerier = (*Store)(nil)

// QueryInstances returns one page of the instances p selects; see
// readmodel.InstanceQuerier.
func (s *Store) QueryInstances(ctx context.Context, p *readmodel.InstanceQuery) ([]*store.Instance, error) {
	if p == nil {
		p = &readmodel.InstanceQuery{}
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "query instances"); err != nil {
		return nil, err
	}
	order := func(a, b *store.Instance) int {
		return cmp.Or(cmp.Compare(a.SagaType, b.SagaType), cmp.Compare(a.Key, b.Key))
	}
	if p.Stuck {
		order = func(a, b *store.Instance) int {
			return cmp.Or(a.UpdatedAt.Compare(b.UpdatedAt), cmp.Compare(a.SagaType, b.SagaType), cmp.Compare(a.Key, b.Key))
		}
	}
	attrs, ok := canon.AttributeFilter(p.Attributes)
	if !ok {
		return nil, nil
	}
	if p.After != nil && p.Before != nil {
		return nil, fmt.Errorf("memstore: query instances: %w", readmodel.ErrBothCursors)
	}
	// The cursor's side: > 0 after it, < 0 before it.
	cursor, side := p.After, 1
	if p.Before != nil {
		cursor, side = p.Before, -1
	}
	var list []*store.Instance
	for _, in := range s.instances {
		if !matches(p, in) || !hasAttributes(in, attrs) {
			continue
		}
		if cursor != nil && order(in, &store.Instance{SagaType: cursor.SagaType, Key: cursor.Key, UpdatedAt: cursor.UpdatedAt})*side <= 0 {
			continue
		}
		list = append(list, in)
	}
	slices.SortFunc(list, order)
	if n := limit(p.Limit); side < 0 {
		list = list[max(0, len(list)-n):] // the nearest before the cursor
	} else {
		list = list[:min(len(list), n)]
	}
	out := make([]*store.Instance, len(list))
	for i, in := range list {
		out[i] = in.Clone()
	}
	return out, nil
}

func matches(p *readmodel.InstanceQuery, in *store.Instance) bool {
	status := p.Status
	if p.Stuck {
		status = store.StatusActive
	}
	return (p.SagaType == "" || in.SagaType == p.SagaType) &&
		(p.State == "" || in.State == p.State) &&
		(status == "" || in.Status() == status) &&
		strings.HasPrefix(in.Key, p.KeyPrefix) &&
		(p.UpdatedFrom.IsZero() || !in.UpdatedAt.Before(p.UpdatedFrom)) &&
		(p.UpdatedBefore.IsZero() || in.UpdatedAt.Before(p.UpdatedBefore))
}

func hasAttributes(in *store.Instance, attrs map[string]string) bool {
	for name, v := range attrs {
		if got, ok := in.Attributes[name]; !ok || got != v {
			return false
		}
	}
	return true
}

// CountInstances counts instances by saga type, state and status; see
// readmodel.InstanceQuerier.
func (s *Store) CountInstances(ctx context.Context, sagaType string) ([]readmodel.StateCount, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "count instances"); err != nil {
		return nil, err
	}
	counts := map[readmodel.StateCount]int{}
	for k, in := range s.instances {
		if sagaType == "" || k.SagaType == sagaType {
			counts[readmodel.StateCount{SagaType: k.SagaType, State: in.State, Status: in.Status()}]++
		}
	}
	out := make([]readmodel.StateCount, 0, len(counts))
	for c, n := range counts {
		c.Count = n
		out = append(out, c)
	}
	slices.SortFunc(out, compareCounts)
	return out, nil
}

func compareCounts(a, b readmodel.StateCount) int {
	return cmp.Or(cmp.Compare(a.SagaType, b.SagaType), cmp.Compare(a.State, b.State), cmp.Compare(a.Status, b.Status))
}

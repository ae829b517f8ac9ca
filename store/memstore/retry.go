package memstore

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/idemhq/idem/store"
)

var _ store.RetryRecorder = (*Store)(nil)

// RecordRetry stores r (see store.RetryRecorder), keeping the
// FirstFailedAt of the retry it replaces.
func (s *Store) RecordRetry(ctx context.Context, r *store.Retry) error {
	if err := r.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "record retry"); err != nil {
		return err
	}
	s.recordRetry(r)
	return nil
}

// recordRetry stores r, which Validate accepted, keeping the
// FirstFailedAt of the retry it replaces, unless the stored retry has
// more attempts. The caller holds s.mu for writing.
func (s *Store) recordRetry(r *store.Retry) {
	c := *r
	c.Error = store.RetryText(r.Error)
	c.Envelope = cloneEnvelope(r.Envelope)
	if old := s.retries[r.ID]; old != nil {
		if !replacesRetry(old, r) {
			return
		}
		keepRetry(&c, old)
	}
	if s.retries == nil {
		s.retries = make(map[string]*store.Retry)
	}
	s.retries[r.ID] = &c
}

var _ store.RetrySweeper = (*Store)(nil)

// SweepRetries deletes at most p.Limit retries whose NextAttemptAt is
// before p.NextAttemptBefore, oldest first (see store.RetrySweeper).
func (s *Store) SweepRetries(ctx context.Context, p *store.StaleRetries) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("memstore: sweep retries: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "sweep retries"); err != nil {
		return 0, err
	}
	var stale []*store.Retry
	for _, r := range s.retries {
		if r.NextAttemptAt.Before(p.NextAttemptBefore) {
			stale = append(stale, r)
		}
	}
	slices.SortFunc(stale, func(a, b *store.Retry) int {
		return cmp.Or(a.NextAttemptAt.Compare(b.NextAttemptAt), cmp.Compare(a.ID, b.ID))
	})
	stale = stale[:min(len(stale), p.Limit)]
	for _, r := range stale {
		delete(s.retries, r.ID)
	}
	return len(stale), nil
}

// Retries returns the retries of the saga k, ordered by (FirstFailedAt,
// ID), at most store.MaxRetriesOf.
func (s *Store) Retries(ctx context.Context, k store.Key) ([]store.Retry, error) {
	return s.selectRetries(ctx, "retries", func(r *store.Retry) bool { return r.SagaType == k.SagaType && r.Key == k.Key }, store.MaxRetriesOf)
}

// QueryRetries returns one page of the retries q selects (see
// store.RetryRecorder).
func (s *Store) QueryRetries(ctx context.Context, q *store.RetryQuery) ([]store.Retry, error) {
	if q == nil {
		q = &store.RetryQuery{}
	}
	after := &store.Retry{ID: q.AfterID, FirstFailedAt: q.AfterFirstFailedAt}
	first := q.AfterID == "" && q.AfterFirstFailedAt.IsZero()
	return s.selectRetries(ctx, "query retries", func(r *store.Retry) bool {
		return (q.SagaType == "" || r.SagaType == q.SagaType) && (first || compareRetries(r, after) > 0)
	}, q.PageLimit())
}

func (s *Store) selectRetries(ctx context.Context, op string, match func(*store.Retry) bool, n int) ([]store.Retry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, op); err != nil {
		return nil, err
	}
	var out []*store.Retry
	for _, r := range s.retries {
		if match(r) {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, compareRetries)
	rs := make([]store.Retry, 0, min(n, len(out)))
	for _, r := range out[:min(n, len(out))] {
		c := *r
		c.Envelope = cloneEnvelope(r.Envelope)
		rs = append(rs, c)
	}
	return rs, nil
}

func compareRetries(a, b *store.Retry) int {
	return cmp.Or(a.FirstFailedAt.Compare(b.FirstFailedAt), cmp.Compare(a.ID, b.ID))
}

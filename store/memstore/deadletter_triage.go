package memstore

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var (
	_ readmodel.DeadLetterGrouper  = (*Store)(nil)
	_ readmodel.DeadLetterArchiver = (*Store)(nil)
)

// GroupDeadLetters returns the groups of the dead letters q selects; see
// readmodel.DeadLetterGrouper.
func (s *Store) GroupDeadLetters(ctx context.Context, q *readmodel.DeadLetterQuery) ([]readmodel.DeadLetterGroup, error) {
	q = cmp.Or(q, &readmodel.DeadLetterQuery{})
	mark, err := parseMark(q.AsOf)
	if err != nil {
		return nil, err
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "group dead letters"); err != nil {
		return nil, err
	}
	type gk struct{ fp, reason string }
	by := map[gk]*readmodel.DeadLetterGroup{}
	latest := map[gk]*store.DeadLetter{}
	for _, d := range s.dead {
		if !s.selects(q, d, mark) {
			continue
		}
		k := gk{d.Fingerprint, d.Reason}
		g := by[k]
		if g == nil {
			g = &readmodel.DeadLetterGroup{Fingerprint: d.Fingerprint, Reason: d.Reason, FirstSeen: d.FirstFailedAt, LastSeen: d.LastFailedAt}
			by[k] = g
		}
		g.Count++
		g.FirstSeen = minTime(g.FirstSeen, d.FirstFailedAt)
		if l := latest[k]; l == nil || d.LastFailedAt.After(l.LastFailedAt) || (d.LastFailedAt.Equal(l.LastFailedAt) && d.ID < l.ID) {
			latest[k], g.LastSeen, g.SampleError = d, d.LastFailedAt, d.Error
		}
	}
	out := make([]readmodel.DeadLetterGroup, 0, len(by))
	for _, g := range by {
		out = append(out, *g)
	}
	slices.SortFunc(out, func(a, b readmodel.DeadLetterGroup) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), b.LastSeen.Compare(a.LastSeen), cmp.Compare(a.Fingerprint, b.Fingerprint), cmp.Compare(a.Reason, b.Reason))
	})
	return out[:min(len(out), limit(q.Limit))], nil
}

// ArchiveDeadLetters archives the dead letters among p.IDs that are not
// archived and that p.AsOf selects; see readmodel.DeadLetterArchiver.
func (s *Store) ArchiveDeadLetters(ctx context.Context, p *readmodel.ArchiveParams) (int, error) {
	mark, err := parseMark(p.AsOf)
	if err != nil {
		return 0, err
	}
	at := p.At
	if at.IsZero() {
		at = time.Now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "archive dead letters"); err != nil {
		return 0, err
	}
	n := 0
	for _, id := range p.IDs {
		if d := s.dead[id]; d != nil && !d.Archived() && s.unchangedSince(id, mark) {
			d.ArchivedAt = at
			s.archived(id)
			n++
		}
	}
	return n, nil
}

// RestoreDeadLetters restores the archived dead letters among p.IDs that
// p.AsOf selects; see
// readmodel.DeadLetterArchiver.
func (s *Store) RestoreDeadLetters(ctx context.Context, p *readmodel.ArchiveParams) (int, error) {
	mark, err := parseMark(p.AsOf)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "restore dead letters"); err != nil {
		return 0, err
	}
	n := 0
	for _, id := range p.IDs {
		if d := s.dead[id]; d != nil && d.Archived() && s.unchangedSince(id, mark) {
			d.ArchivedAt = time.Time{}
			s.archived(id)
			n++
		}
	}
	return n, nil
}

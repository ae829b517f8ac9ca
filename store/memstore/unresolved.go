package memstore

import (
	"context"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.UnresolvedCounter = (*Store)(nil)

// CountUnresolved counts the unresolved, not archived dead letters, at
// most bound of them; see readmodel.UnresolvedCounter.
func (s *Store) CountUnresolved(ctx context.Context, bound int) (int, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "count unresolved dead letters"); err != nil {
		return 0, err
	}
	n := 0
	for _, d := range s.dead {
		if n >= bound {
			break
		}
		if !d.Archived() && d.State() == store.DeadLettersUnresolved {
			n++
		}
	}
	return n, nil
}

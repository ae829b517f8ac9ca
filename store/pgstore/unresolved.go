package pgstore

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.UnresolvedCounter = (*Store)(nil)

// countUnresolvedSQL counts, up to $1, the dead letters of the partial
// index idem_dead_letters_open (migration 17): its predicate word for word,
// so that the count reads that index and no other dead letter.
const countUnresolvedSQL = `SELECT count(*) FROM (SELECT 1 FROM idem_dead_letters
WHERE archived_at IS NULL AND coalesce(latest_outcome, '') NOT IN ('pending', 'succeeded', 'duplicate') LIMIT $1) u`

// CountUnresolved counts the unresolved, not archived dead letters, at
// most bound of them; see readmodel.UnresolvedCounter.
func (s *Store) CountUnresolved(ctx context.Context, bound int) (int, error) {
	if err := s.check("count unresolved dead letters"); err != nil {
		return 0, err
	}
	var n int
	if err := s.pool.QueryRow(ctx, countUnresolvedSQL, max(bound, 0)).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: count unresolved dead letters: %w", translate(err))
	}
	return n, nil
}

package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

var _ store.FairShareReader = (*Store)(nil)

// waitingSharesSQL counts the visible messages by share, the most first,
// with the number of shares in all.
var waitingSharesSQL = `
SELECT share, n, count(*) OVER () FROM (
  SELECT ` + shareExpr + ` AS share, count(*) AS n
  FROM idem_queue WHERE visible_at <= now() GROUP BY 1
) s ORDER BY n DESC, share COLLATE "C" LIMIT $1`

// WaitingShares returns the max shares with the most messages waiting,
// and how many shares have any.
func (s *Store) WaitingShares(ctx context.Context, max int) ([]store.ShareWaiting, int, error) {
	if err := s.check("waiting shares"); err != nil {
		return nil, 0, err
	}
	rows, err := s.pool.Query(ctx, waitingSharesSQL, max)
	if err != nil {
		return nil, 0, fmt.Errorf("pgstore: waiting shares: %w", translate(err))
	}
	total := 0
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.ShareWaiting, error) {
		var w store.ShareWaiting
		return w, r.Scan(&w.Share, &w.Waiting, &total)
	})
	if err != nil {
		return nil, 0, fmt.Errorf("pgstore: waiting shares: %w", translate(err))
	}
	return out, total, nil
}

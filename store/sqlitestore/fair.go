package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

var _ store.FairShareReader = (*Store)(nil)

// waitingSharesSQL counts the visible messages by share, the most first,
// with the number of shares in all.
const waitingSharesSQL = `
SELECT share, n, count(*) OVER () FROM (
  SELECT coalesce(json_extract(CASE WHEN json_valid(envelope) THEN envelope END, '$.headers."idem-fairness-key"'), '') AS share, count(*) AS n
  FROM idem_queue WHERE visible_at <= ?1 GROUP BY 1
) ORDER BY n DESC, share LIMIT ?2`

// WaitingShares returns the max shares with the most messages waiting,
// and how many shares have any.
func (s *Store) WaitingShares(ctx context.Context, max int) ([]store.ShareWaiting, int, error) {
	if err := s.check("waiting shares"); err != nil {
		return nil, 0, err
	}
	rows, err := s.rdb.QueryContext(ctx, waitingSharesSQL, micros(time.Now()), max)
	if err != nil {
		return nil, 0, fmt.Errorf("sqlitestore: waiting shares: %w", err)
	}
	defer rows.Close()
	var out []store.ShareWaiting
	total := 0
	for rows.Next() {
		var w store.ShareWaiting
		if err := rows.Scan(&w.Share, &w.Waiting, &total); err != nil {
			return nil, 0, fmt.Errorf("sqlitestore: waiting shares: %w", err)
		}
		out = append(out, w)
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("sqlitestore: waiting shares: %w", err)
	}
	return out, total, nil
}

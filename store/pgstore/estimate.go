package pgstore

import (
	"context"
	"fmt"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

// ExactCountBelow is how many instances (by the planner's estimate,
// pg_class.reltuples) EstimateInstanceCounts still counts exactly. Above
// it, an exact count reads every row (over a second for 1,000,000 on a
// small server), so the counts come from a block sample instead.
const ExactCountBelow = 200_000

// sampleRows is about how many instances the block sample reads.
const sampleRows = 25_000

const sampleCountsSQL = `
SELECT saga_type, state, CASE WHEN finished_at IS NULL THEN 'active' ELSE 'finished' END AS status, count(*)
FROM idem_instances TABLESAMPLE SYSTEM ($1)
GROUP BY 1, 2, 3 ORDER BY saga_type COLLATE "C", state COLLATE "C", status`

// EstimateInstanceCounts counts instances by saga type, state and status
// like CountInstances when the table holds fewer than ExactCountBelow rows
// (exact is then true). Above that it counts a random sample of the
// table's pages (about 25,000 rows) and scales each count by the table's
// estimated size: the figures are estimates, a state with few instances
// may be missing, and exact is false. The console shows them as sampled.
func (s *Store) EstimateInstanceCounts(ctx context.Context) (counts []store.StateCount, exact bool, err error) {
	if err := s.check("estimate instance counts"); err != nil {
		return nil, false, err
	}
	var total float64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(reltuples), -1)::float8 FROM pg_class WHERE oid = to_regclass('idem_instances')`).Scan(&total); err != nil {
		return nil, false, fmt.Errorf("pgstore: estimate instance counts: %w", translate(err))
	}
	if total < ExactCountBelow { // -1: never analysed
		cs, err := s.CountInstances(ctx, "")
		return cs, err == nil, err
	}
	pct := math.Min(100, 100*sampleRows/total)
	rows, err := s.pool.Query(ctx, sampleCountsSQL, pct)
	if err != nil {
		return nil, false, fmt.Errorf("pgstore: estimate instance counts: %w", translate(err))
	}
	counts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.StateCount, error) {
		var c store.StateCount
		err := r.Scan(&c.SagaType, &c.State, &c.Status, &c.Count)
		return c, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("pgstore: estimate instance counts: %w", translate(err))
	}
	sampled := 0
	for _, c := range counts {
		sampled += c.Count
	}
	for i := range counts {
		counts[i].Count = int(math.Round(float64(counts[i].Count) * total / float64(sampled)))
	}
	return counts, false, nil
}

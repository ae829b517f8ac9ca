package pgstore

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// ExactCountBelow is how many instances (by the planner's estimate,
// pg_class.reltuples) EstimateInstanceCounts still counts exactly. Above
// it, an exact count reads every row (over a second for 1,000,000 on a
// small server), so the counts come from a block sample instead.
const ExactCountBelow = 200_000

// sampleRows is about how many instances the block sample reads.
const sampleRows = 10_000

const sampleCountsSQL = `
SELECT saga_type, state, CASE WHEN finished_at IS NULL THEN 'active' ELSE 'finished' END AS status, count(*)
FROM idem_instances TABLESAMPLE SYSTEM ($1)
GROUP BY 1, 2, 3 ORDER BY saga_type COLLATE "C", state COLLATE "C", status`

// EstimateInstanceCounts counts instances by saga type, state and status
// like CountInstances when the table holds fewer than ExactCountBelow rows
// (exact is then true). Above that the counts are estimates and exact is
// false (the console shows them as sampled): the frequencies that the last
// ANALYZE recorded in the statistics idem_instances_counts (migration 009)
// times pg_class.reltuples, or, before the first ANALYZE and on
// PostgreSQL 13, a count of a random sample of the table's pages (about
// 10,000 rows) scaled to the table's size. A state with few instances may
// then be missing.
func (s *Store) EstimateInstanceCounts(ctx context.Context) (counts []readmodel.StateCount, exact bool, err error) {
	if err := s.check("estimate instance counts"); err != nil {
		return nil, false, err
	}
	var total float64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(reltuples), -1)::float8 FROM pg_class WHERE oid = to_regclass($1)`,
		pgx.Identifier{s.cfg.Schema, "idem_instances"}.Sanitize()).Scan(&total); err != nil {
		return nil, false, fmt.Errorf("pgstore: estimate instance counts: %w", translate(err))
	}
	if total < ExactCountBelow { // -1: never analysed
		cs, err := s.CountInstances(ctx, "")
		return cs, err == nil, err
	}
	counts, err = s.statsCounts(ctx, total)
	if err != nil || len(counts) > 0 {
		return counts, false, err
	}
	pct := math.Min(100, 100*sampleRows/total)
	rows, err := s.pool.Query(ctx, sampleCountsSQL, pct)
	if err != nil {
		return nil, false, fmt.Errorf("pgstore: estimate instance counts: %w", translate(err))
	}
	counts, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (readmodel.StateCount, error) {
		var c readmodel.StateCount
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

// statsCounts reads the (type, state, status) frequencies of the most
// common combinations that ANALYZE recorded; none before the first
// ANALYZE or without the statistics object.
const statsCountsSQL = `
SELECT s.most_common_vals[u.i][1], s.most_common_vals[u.i][2], s.most_common_vals[u.i][3], u.f
FROM pg_stats_ext s, unnest(s.most_common_freqs) WITH ORDINALITY AS u(f, i)
WHERE s.statistics_schemaname = $1 AND s.statistics_name = 'idem_instances_counts'`

func (s *Store) statsCounts(ctx context.Context, total float64) ([]readmodel.StateCount, error) {
	rows, err := s.pool.Query(ctx, statsCountsSQL, s.cfg.Schema)
	if err != nil {
		return nil, fmt.Errorf("pgstore: estimate instance counts: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (readmodel.StateCount, error) {
		var c readmodel.StateCount
		var active string
		var f float64
		err := r.Scan(&c.SagaType, &c.State, &active, &f)
		c.Status, c.Count = store.StatusFinished, int(math.Round(f*total))
		if active == "t" || active == "true" {
			c.Status = store.StatusActive
		}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: estimate instance counts: %w", translate(err))
	}
	slices.SortFunc(out, func(a, b readmodel.StateCount) int { // CountInstances's order
		return cmp.Or(strings.Compare(a.SagaType, b.SagaType), strings.Compare(a.State, b.State), strings.Compare(a.Status, b.Status))
	})
	return out, nil
}

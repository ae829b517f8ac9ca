package pgstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store/readmodel"
)

var (
	_ readmodel.RowEstimator = (*Store)(nil)
	_ readmodel.RowCounter   = (*Store)(nil)
)

// estimateRowsSQL estimates each table's rows as the planner does: the
// density that the last VACUUM or ANALYZE measured (pg_class.reltuples
// over relpages) times the table's current size in pages. A table that was
// never analysed, or was empty then, falls back to the live-row count of
// the statistics collector (pg_stat_user_tables.n_live_tup), which every
// insert and delete updates. Both read the catalogs only.
const estimateRowsSQL = `
SELECT c.relname::text,
  (CASE WHEN c.reltuples > 0 AND c.relpages > 0
        THEN c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::float8)
        ELSE coalesce(s.n_live_tup, 0) END)::bigint
FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
WHERE c.oid IN (SELECT to_regclass(t) FROM unnest($1::text[]) AS t)`

// EstimateRows estimates the rows of each table from PostgreSQL's
// statistics, without reading the tables; see readmodel.RowEstimator and
// estimateRowsSQL. The estimates lag the tables by the statistics
// collector's delay (about a second), and after a crash until the next
// ANALYZE.
func (s *Store) EstimateRows(ctx context.Context) (map[string]int64, error) {
	if err := s.check("estimate rows"); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(sqlq.Tables))
	for _, t := range sqlq.Tables {
		names = append(names, pgx.Identifier{s.cfg.Schema, t}.Sanitize()) // no search_path through a pooler
	}
	rows, err := s.pool.Query(ctx, estimateRowsSQL, names)
	if err != nil {
		return nil, fmt.Errorf("pgstore: estimate rows: %w", translate(err))
	}
	out := make(map[string]int64, len(sqlq.Tables))
	var table string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&table, &n}, func() error {
		out[strings.TrimPrefix(table, "idem_")] = max(n, 0)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("pgstore: estimate rows: %w", translate(err))
	}
	return out, nil
}

// CountRows counts the rows of table up to limit, reading at most limit
// rows; see readmodel.RowCounter.
func (s *Store) CountRows(ctx context.Context, table string, limit int64) (int64, error) {
	if err := s.check("count rows"); err != nil {
		return 0, err
	}
	t, ok := sqlq.Tables[table]
	if !ok {
		return 0, fmt.Errorf("pgstore: count rows of %q: no such table (want one of the store.Table names)", table)
	}
	var n int64
	// t is one of the constant names above, never caller input.
	if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM `+t+` LIMIT $1) AS r`, max(limit, 0)).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: count rows of %s: %w", t, translate(err))
	}
	return n, nil
}

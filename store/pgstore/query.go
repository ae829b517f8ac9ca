package pgstore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
)

var _ store.InstanceQuerier = (*Store)(nil)

// The filters shared by both orders: $1 saga type, $2 state, $3 status,
// $4 key prefix (an empty value means any).
// Each filter compares in COLLATE "C" (equality is the same in every
// deterministic collation) so that the "C" indexes of migration 009 serve
// it, the key prefix as a range of idem_instances_keyset.
const queryFilters = `($1 = '' OR saga_type COLLATE "C" = $1) AND ($2 = '' OR state COLLATE "C" = $2)
  AND ($3 = '' OR ($3 = 'active') = (finished_at IS NULL))
  AND ($4 = '' OR starts_with(key COLLATE "C", $4))`

// $5 has a cursor, $6 saga type, $7 key, $8 limit; %s stands for the
// attribute filters.
const queryInstancesSQL = `
SELECT saga_type, key, state, data, schema_version, version, timers, created_at, updated_at, finished_at, attributes
FROM idem_instances
WHERE ` + queryFilters + `%s
  AND (NOT $5 OR (saga_type COLLATE "C", key COLLATE "C") > ($6 COLLATE "C", $7 COLLATE "C"))
ORDER BY saga_type COLLATE "C", key COLLATE "C"
LIMIT $8`

// $5 has a cursor, $6 saga type, $7 key, $8 limit, $9 updated at.
const queryStuckSQL = `
SELECT saga_type, key, state, data, schema_version, version, timers, created_at, updated_at, finished_at, attributes
FROM idem_instances
WHERE finished_at IS NULL AND ` + queryFilters + `%s
  AND (NOT $5 OR (updated_at, saga_type COLLATE "C", key COLLATE "C") > ($9, $6 COLLATE "C", $7 COLLATE "C"))
ORDER BY updated_at, saga_type COLLATE "C", key COLLATE "C"
LIMIT $8`

// QueryInstances returns one page of the instances p selects; see
// store.InstanceQuerier.
func (s *Store) QueryInstances(ctx context.Context, p *store.InstanceQuery) ([]*store.Instance, error) {
	if err := s.check("query instances"); err != nil {
		return nil, err
	}
	if p == nil {
		p = &store.InstanceQuery{}
	}
	var c store.InstanceCursor
	if p.After != nil {
		c = *p.After
	}
	q, args := queryInstancesSQL, []any{p.SagaType, p.State, p.Status, p.KeyPrefix, p.After != nil, c.SagaType, c.Key, sqlq.Limit(p.Limit)}
	if p.Stuck {
		q, args = queryStuckSQL, append(args, c.UpdatedAt)
	}
	attrs, ok := canon.AttributeFilter(p.Attributes)
	if !ok {
		return nil, nil
	}
	var filters strings.Builder
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		fmt.Fprintf(&filters, `
  AND EXISTS (SELECT 1 FROM idem_saga_attributes a WHERE a.name = $%d AND a.value = $%d
    AND a.saga_type = idem_instances.saga_type AND a.key = idem_instances.key)`, len(args)+1, len(args)+2)
		args = append(args, name, attrs[name])
	}
	// An unnamed statement is planned with its values, so an empty filter
	// drops out and a prefix becomes an index range; a cached generic plan
	// would keep every "$n = '' OR" and scan (see docs/benchmarks.md).
	rows, err := s.pool.Query(ctx, fmt.Sprintf(q, filters.String()), append([]any{pgx.QueryExecModeExec}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: query instances: %w", translate(err))
	}
	defer rows.Close()
	var out []*store.Instance
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return nil, fmt.Errorf("pgstore: query instances: %w", err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: query instances: %w", translate(err))
	}
	return out, nil
}

const countInstancesSQL = `
SELECT saga_type, state, CASE WHEN finished_at IS NULL THEN 'active' ELSE 'finished' END AS status, count(*)
FROM idem_instances WHERE $1 = '' OR saga_type = $1
GROUP BY 1, 2, 3 ORDER BY saga_type COLLATE "C", state COLLATE "C", status`

// CountInstances counts instances by saga type, state and status; see
// store.InstanceQuerier.
func (s *Store) CountInstances(ctx context.Context, sagaType string) ([]store.StateCount, error) {
	if err := s.check("count instances"); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, countInstancesSQL, sagaType)
	if err != nil {
		return nil, fmt.Errorf("pgstore: count instances: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.StateCount, error) {
		var c store.StateCount
		err := r.Scan(&c.SagaType, &c.State, &c.Status, &c.Count)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: count instances: %w", translate(err))
	}
	return out, nil
}

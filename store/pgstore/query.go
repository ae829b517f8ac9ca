package pgstore

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.InstanceQuerier = (*Store)(nil)

// The filters shared by every order: $1 saga type, $2 state, $3 status,
// $4 key prefix (an empty value means any), $5 and $6 the UpdatedAt range
// [from, before) (NULL when open); %s stands for the attribute filters.
// Each filter compares in COLLATE "C" (equality is the same in every
// deterministic collation) so that the "C" indexes of migration 009 serve
// it, the key prefix as a range of idem_instances_keyset.
const queryFilters = `($1 = '' OR saga_type COLLATE "C" = $1) AND ($2 = '' OR state COLLATE "C" = $2)
  AND ($3 = '' OR ($3 = 'active') = (finished_at IS NULL))
  AND ($4 = '' OR starts_with(key COLLATE "C", $4))
  AND ($5::timestamptz IS NULL OR updated_at >= $5) AND ($6::timestamptz IS NULL OR updated_at < $6)%s`

const instanceCols = `saga_type, key, state, data, schema_version, version, timers, created_at, updated_at, finished_at, attributes`

// The pages of each order, after a cursor and before one: $7 has a
// cursor, $8 saga type, $9 key, $10 limit, and in the stuck order $11
// updated at. A page before a cursor is read in reverse and turned round.
const (
	queryInstancesSQL = `
SELECT ` + instanceCols + ` FROM idem_instances
WHERE ` + queryFilters + `
  AND (NOT $7 OR (saga_type COLLATE "C", key COLLATE "C") > ($8 COLLATE "C", $9 COLLATE "C"))
ORDER BY saga_type COLLATE "C", key COLLATE "C"
LIMIT $10`
	queryInstancesBeforeSQL = `
SELECT ` + instanceCols + ` FROM idem_instances
WHERE ` + queryFilters + `
  AND $7 AND (saga_type COLLATE "C", key COLLATE "C") < ($8 COLLATE "C", $9 COLLATE "C")
ORDER BY saga_type COLLATE "C" DESC, key COLLATE "C" DESC
LIMIT $10`
	queryStuckSQL = `
SELECT ` + instanceCols + ` FROM idem_instances
WHERE finished_at IS NULL AND ` + queryFilters + `
  AND (NOT $7 OR (updated_at, saga_type COLLATE "C", key COLLATE "C") > ($11, $8 COLLATE "C", $9 COLLATE "C"))
ORDER BY updated_at, saga_type COLLATE "C", key COLLATE "C"
LIMIT $10`
	queryStuckBeforeSQL = `
SELECT ` + instanceCols + ` FROM idem_instances
WHERE finished_at IS NULL AND ` + queryFilters + `
  AND $7 AND (updated_at, saga_type COLLATE "C", key COLLATE "C") < ($11, $8 COLLATE "C", $9 COLLATE "C")
ORDER BY updated_at DESC, saga_type COLLATE "C" DESC, key COLLATE "C" DESC
LIMIT $10`
)

// instanceStatements are the statements of QueryInstances.
var instanceStatements = sqlq.InstanceStatements{
	Keys: queryInstancesSQL, KeysBefore: queryInstancesBeforeSQL, Stuck: queryStuckSQL, StuckBefore: queryStuckBeforeSQL,
}

// QueryInstances returns one page of the instances p selects; see
// readmodel.InstanceQuerier.
func (s *Store) QueryInstances(ctx context.Context, p *readmodel.InstanceQuery) ([]*store.Instance, error) {
	if err := s.check("query instances"); err != nil {
		return nil, err
	}
	if p == nil {
		p = &readmodel.InstanceQuery{}
	}
	if p.After != nil && p.Before != nil {
		return nil, fmt.Errorf("pgstore: query instances: %w", readmodel.ErrBothCursors)
	}
	q, c := instanceStatements.Pick(p)
	args, attrArgs, ok := instanceFilterArgs(p)
	if !ok || !representable(c.SagaType, c.Key) {
		// No stored instance has such a value (a hand-made cursor):
		// nothing to send the server, which would refuse it.
		return nil, nil
	}
	args = append(args, p.After != nil || p.Before != nil, c.SagaType, c.Key, sqlq.Limit(p.Limit))
	if p.Stuck {
		args = append(args, c.UpdatedAt)
	}
	filters := attributeFilters(len(attrArgs)/2, len(args)+1)
	args = append(args, attrArgs...)
	// An unnamed statement is planned with its values, so an empty filter
	// drops out and a prefix becomes an index range; a cached generic plan
	// would keep every "$n = '' OR" and scan (see docs/benchmarks.md).
	rows, err := s.pool.Query(ctx, fmt.Sprintf(q, filters), append([]any{pgx.QueryExecModeExec}, args...)...)
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
	if p.Before != nil {
		slices.Reverse(out)
	}
	return out, nil
}

const countInstancesSQL = `
SELECT saga_type, state, CASE WHEN finished_at IS NULL THEN 'active' ELSE 'finished' END AS status, count(*)
FROM idem_instances WHERE $1 = '' OR saga_type = $1
GROUP BY 1, 2, 3 ORDER BY saga_type COLLATE "C", state COLLATE "C", status`

// CountInstances counts instances by saga type, state and status; see
// readmodel.InstanceQuerier.
func (s *Store) CountInstances(ctx context.Context, sagaType string) ([]readmodel.StateCount, error) {
	if err := s.check("count instances"); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, countInstancesSQL, sagaType)
	if err != nil {
		return nil, fmt.Errorf("pgstore: count instances: %w", translate(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (readmodel.StateCount, error) {
		var c readmodel.StateCount
		err := r.Scan(&c.SagaType, &c.State, &c.Status, &c.Count)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: count instances: %w", translate(err))
	}
	return out, nil
}

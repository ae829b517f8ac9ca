package sqlitestore

import (
	"context"
	"fmt"
	"slices"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ readmodel.InstanceQuerier = (*Store)(nil)

// The filters shared by every order: ?1 saga type, ?2 state, ?3 status,
// ?4 key prefix (an empty value means any), ?5 and ?6 the UpdatedAt range
// [from, before) in microseconds (the smallest and largest int64 when
// open); %s stands for the attribute filters.
const queryFilters = `(?1 = '' OR saga_type = ?1) AND (?2 = '' OR state = ?2)
  AND (?3 = '' OR (?3 = 'active') = (finished_at IS NULL))
  AND (?4 = '' OR (key >= ?4 AND substr(key, 1, length(?4)) = ?4))
  AND updated_at >= ?5 AND updated_at < ?6%s`

// The pages of each order, after a cursor and before one: ?7 has a
// cursor, ?8 saga type, ?9 key, ?10 limit, ?11 updated at. A page before
// a cursor is read in reverse and turned round.
const (
	queryInstancesSQL = `
SELECT ` + instanceCols + ` FROM idem_instances
WHERE ` + queryFilters + `
  AND (NOT ?7 OR (saga_type, key) > (?8, ?9))
ORDER BY saga_type, key
LIMIT ?10`
	queryInstancesBeforeSQL = `
SELECT ` + instanceCols + ` FROM idem_instances
WHERE ` + queryFilters + `
  AND (saga_type, key) < (?8, ?9)
ORDER BY saga_type DESC, key DESC
LIMIT ?10`
	queryStuckSQL = `
SELECT ` + instanceCols + ` FROM idem_instances
WHERE finished_at IS NULL AND ` + queryFilters + `
  AND (NOT ?7 OR (updated_at, saga_type, key) > (?11, ?8, ?9))
ORDER BY updated_at, saga_type, key
LIMIT ?10`
	queryStuckBeforeSQL = `
SELECT ` + instanceCols + ` FROM idem_instances
WHERE finished_at IS NULL AND ` + queryFilters + `
  AND (updated_at, saga_type, key) < (?11, ?8, ?9)
ORDER BY updated_at DESC, saga_type DESC, key DESC
LIMIT ?10`
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
		return nil, fmt.Errorf("sqlitestore: query instances: %w", readmodel.ErrBothCursors)
	}
	hasCursor := p.After != nil || p.Before != nil
	q, c := instanceStatements.Pick(p)
	args, filters, ok := instanceFilterArgs(p)
	if !ok {
		return nil, nil
	}
	args = append(args, hasCursor, c.SagaType, c.Key, sqlq.Limit(p.Limit), micros(c.UpdatedAt))
	args = append(args, filters...)
	rows, err := s.rdb.QueryContext(ctx, fmt.Sprintf(q, attributeFilters(len(filters)/2, 12)), args...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: query instances: %w", err)
	}
	defer rows.Close()
	var out []*store.Instance
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: query instances: %w", err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: query instances: %w", err)
	}
	if p.Before != nil {
		slices.Reverse(out)
	}
	return out, nil
}

const countInstancesSQL = `
SELECT saga_type, state, CASE WHEN finished_at IS NULL THEN 'active' ELSE 'finished' END AS status, count(*)
FROM idem_instances WHERE ?1 = '' OR saga_type = ?1
GROUP BY saga_type, state, status ORDER BY saga_type, state, status`

// CountInstances counts instances by saga type, state and status; see
// readmodel.InstanceQuerier.
func (s *Store) CountInstances(ctx context.Context, sagaType string) ([]readmodel.StateCount, error) {
	if err := s.check("count instances"); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, countInstancesSQL, sagaType)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: count instances: %w", err)
	}
	defer rows.Close()
	out := []readmodel.StateCount{}
	for rows.Next() {
		var c readmodel.StateCount
		if err := rows.Scan(&c.SagaType, &c.State, &c.Status, &c.Count); err != nil {
			return nil, fmt.Errorf("sqlitestore: count instances: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: count instances: %w", err)
	}
	return out, nil
}

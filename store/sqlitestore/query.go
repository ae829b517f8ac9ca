package sqlitestore

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
)

var _ store.InstanceQuerier = (*Store)(nil)

// The filters shared by both orders: ?1 saga type, ?2 state, ?3 status,
// ?4 key prefix (an empty value means any).
const queryFilters = `(?1 = '' OR saga_type = ?1) AND (?2 = '' OR state = ?2)
  AND (?3 = '' OR (?3 = 'active') = (finished_at IS NULL))
  AND (?4 = '' OR (key >= ?4 AND substr(key, 1, length(?4)) = ?4))`

// ?5 has a cursor, ?6 saga type, ?7 key, ?8 limit; %s stands for the
// attribute filters.
const queryInstancesSQL = `
SELECT ` + instanceCols + ` FROM idem_instances
WHERE ` + queryFilters + `%s
  AND (NOT ?5 OR (saga_type, key) > (?6, ?7))
ORDER BY saga_type, key
LIMIT ?8`

// ?5 has a cursor, ?6 saga type, ?7 key, ?8 limit, ?9 updated at.
const queryStuckSQL = `
SELECT ` + instanceCols + ` FROM idem_instances
WHERE finished_at IS NULL AND ` + queryFilters + `%s
  AND (NOT ?5 OR (updated_at, saga_type, key) > (?9, ?6, ?7))
ORDER BY updated_at, saga_type, key
LIMIT ?8`

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
	attrs, ok := canon.AttributeFilter(p.Attributes)
	if !ok {
		return nil, nil
	}
	q := queryInstancesSQL
	if p.Stuck {
		q = queryStuckSQL
	}
	args := []any{p.SagaType, p.State, p.Status, p.KeyPrefix,
		p.After != nil, c.SagaType, c.Key, sqlq.Limit(p.Limit), micros(c.UpdatedAt)}
	var filters strings.Builder
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		fmt.Fprintf(&filters, `
  AND EXISTS (SELECT 1 FROM idem_saga_attributes a WHERE a.name = ?%d AND a.value = ?%d
    AND a.saga_type = idem_instances.saga_type AND a.key = idem_instances.key)`, len(args)+1, len(args)+2)
		args = append(args, name, attrs[name])
	}
	rows, err := s.rdb.QueryContext(ctx, fmt.Sprintf(q, filters.String()), args...)
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
	return out, nil
}

const countInstancesSQL = `
SELECT saga_type, state, CASE WHEN finished_at IS NULL THEN 'active' ELSE 'finished' END AS status, count(*)
FROM idem_instances WHERE ?1 = '' OR saga_type = ?1
GROUP BY saga_type, state, status ORDER BY saga_type, state, status`

// CountInstances counts instances by saga type, state and status; see
// store.InstanceQuerier.
func (s *Store) CountInstances(ctx context.Context, sagaType string) ([]store.StateCount, error) {
	if err := s.check("count instances"); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, countInstancesSQL, sagaType)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: count instances: %w", err)
	}
	defer rows.Close()
	out := []store.StateCount{}
	for rows.Next() {
		var c store.StateCount
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

package pgstore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var (
	_ readmodel.TimerQuerier = (*Store)(nil)
	_ readmodel.QueryCounter = (*Store)(nil)
)

// instanceFilterArgs returns the arguments $1 to $6 of queryFilters and
// the attribute filters' name and value pairs; false when a filter can
// match nothing (a value PostgreSQL cannot hold as text, or an attribute
// value no attribute can hold).
func instanceFilterArgs(p *readmodel.InstanceQuery) (args, attrArgs []any, ok bool) {
	attrs, ok := canon.AttributeFilter(p.Attributes)
	if !ok || !representable(p.SagaType, p.State, p.Status, p.KeyPrefix) {
		return nil, nil, false
	}
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		attrArgs = append(attrArgs, name, attrs[name])
	}
	return []any{p.SagaType, p.State, p.Status, p.KeyPrefix, optTime(p.UpdatedFrom), optTime(p.UpdatedBefore)}, attrArgs, true
}

// optTime is t, or NULL for the zero time.
func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// attributeFilters is the SQL of n attribute filters whose name and value
// are the parameters from $first on.
func attributeFilters(n, first int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `
  AND EXISTS (SELECT 1 FROM idem_saga_attributes a WHERE a.name = $%d AND a.value = $%d
    AND a.saga_type = idem_instances.saga_type AND a.key = idem_instances.key)`, first+2*i, first+2*i+1)
	}
	return b.String()
}

// selectInstanceQuerySQL is every row queryFilters selects, at most $8
// (all when NULL); $7 is Stuck. It is counted, and explained for an
// estimate.
const selectInstanceQuerySQL = `SELECT 1 FROM idem_instances
WHERE ` + queryFilters + `
  AND (NOT $7 OR finished_at IS NULL)
LIMIT $8`

// CountInstanceQuery counts the instances p selects, reading at most
// bound+1 rows; see readmodel.QueryCounter. Above the bound, Estimate is the
// planner's estimate of the rows the query selects.
func (s *Store) CountInstanceQuery(ctx context.Context, p *readmodel.InstanceQuery, bound int) (readmodel.Count, error) {
	if err := s.check("count instances"); err != nil {
		return readmodel.Count{}, err
	}
	if p == nil {
		p = &readmodel.InstanceQuery{}
	}
	args, attrArgs, ok := instanceFilterArgs(p)
	if !ok {
		return readmodel.Count{Exact: true}, nil
	}
	args = append(append(args, p.Stuck, bound+1), attrArgs...)
	q := fmt.Sprintf(selectInstanceQuerySQL, attributeFilters(len(attrArgs)/2, 9))
	c, err := s.boundedCount(ctx, q, args, 7, bound)
	if err != nil {
		return readmodel.Count{}, fmt.Errorf("pgstore: count instances: %w", err)
	}
	return c, nil
}

// boundedCount counts the rows of q, a statement that reads at most the
// parameter $limit (bound+1) rows, and above the bound asks the planner
// how many rows q reads without the limit.
func (s *Store) boundedCount(ctx context.Context, q string, args []any, limit, bound int) (readmodel.Count, error) {
	// Unnamed statements, planned with their values (see QueryInstances).
	var n int
	if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM ("+q+") t", append([]any{pgx.QueryExecModeExec}, args...)...).Scan(&n); err != nil {
		return readmodel.Count{}, translate(err)
	}
	c := readmodel.BoundedCount(n, bound)
	if c.Exact {
		return c, nil
	}
	args = slices.Clone(args)
	args[limit] = nil // LIMIT NULL: every row
	var plan []byte
	if err := s.pool.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+q, append([]any{pgx.QueryExecModeExec}, args...)...).Scan(&plan); err != nil {
		return readmodel.Count{}, translate(err)
	}
	var explained []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		}
	}
	if err := json.Unmarshal(plan, &explained); err != nil || len(explained) == 0 {
		return readmodel.Count{}, fmt.Errorf("read the plan's estimate: %w", err)
	}
	c.Estimate = int(math.Round(explained[0].Plan.Rows))
	return c, nil
}

// The timers a TimerQuery selects: $1 saga type (empty: any), $2 and $3
// the due range [from, before) (NULL when open).
const timerFilters = `($1 = '' OR saga_type COLLATE "C" = $1)
  AND ($2::timestamptz IS NULL OR due_at >= $2) AND ($3::timestamptz IS NULL OR due_at < $3)`

// The pages after a cursor and before one: $4 has a cursor, $5 due at, $6
// saga type, $7 key, $8 name, $9 limit. selectTimerQuerySQL is every
// selected timer, at most $4 (all when NULL).
const (
	queryTimersSQL = `
SELECT saga_type, key, name, due_at, envelope, body FROM idem_timers
WHERE ` + timerFilters + `
  AND (NOT $4 OR (due_at, saga_type COLLATE "C", key COLLATE "C", name COLLATE "C") > ($5::timestamptz, $6 COLLATE "C", $7 COLLATE "C", $8 COLLATE "C"))
ORDER BY due_at, saga_type COLLATE "C", key COLLATE "C", name COLLATE "C"
LIMIT $9`
	queryTimersBeforeSQL = `
SELECT saga_type, key, name, due_at, envelope, body FROM idem_timers
WHERE ` + timerFilters + `
  AND $4 AND (due_at, saga_type COLLATE "C", key COLLATE "C", name COLLATE "C") < ($5::timestamptz, $6 COLLATE "C", $7 COLLATE "C", $8 COLLATE "C")
ORDER BY due_at DESC, saga_type COLLATE "C" DESC, key COLLATE "C" DESC, name COLLATE "C" DESC
LIMIT $9`
	selectTimerQuerySQL = `SELECT 1 FROM idem_timers WHERE ` + timerFilters + ` LIMIT $4`
)

// QueryTimers returns one page of the timers p selects; see
// readmodel.TimerQuerier.
func (s *Store) QueryTimers(ctx context.Context, p *readmodel.TimerQuery) ([]store.Timer, error) {
	if err := s.check("query timers"); err != nil {
		return nil, err
	}
	if p == nil {
		p = &readmodel.TimerQuery{}
	}
	if p.After != nil && p.Before != nil {
		return nil, fmt.Errorf("pgstore: query timers: %w", readmodel.ErrBothCursors)
	}
	if !representable(p.SagaType) {
		return nil, nil
	}
	q, c := queryTimersSQL, p.After
	if p.Before != nil {
		q, c = queryTimersBeforeSQL, p.Before
	}
	var due *time.Time
	if c == nil {
		c = &readmodel.TimerCursor{}
	} else {
		due = &c.DueAt
	}
	if !representable(c.SagaType, c.Key, c.Name) {
		return nil, fmt.Errorf("pgstore: query timers: the cursor holds a value no timer has")
	}
	rows, err := s.pool.Query(ctx, q, pgx.QueryExecModeExec, p.SagaType, optTime(p.DueFrom), optTime(p.DueBefore),
		p.After != nil || p.Before != nil, due, c.SagaType, c.Key, c.Name, sqlq.Limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: query timers: %w", translate(err))
	}
	ts, err := scanTimers(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: query timers: %w", err)
	}
	if p.Before != nil {
		slices.Reverse(ts)
	}
	return ts, nil
}

// CountTimerQuery counts the timers p selects, reading at most bound+1
// rows; see readmodel.QueryCounter. Above the bound, Estimate is the
// planner's estimate.
func (s *Store) CountTimerQuery(ctx context.Context, p *readmodel.TimerQuery, bound int) (readmodel.Count, error) {
	if err := s.check("count timers"); err != nil {
		return readmodel.Count{}, err
	}
	if p == nil {
		p = &readmodel.TimerQuery{}
	}
	if !representable(p.SagaType) {
		return readmodel.Count{Exact: true}, nil
	}
	c, err := s.boundedCount(ctx, selectTimerQuerySQL, []any{p.SagaType, optTime(p.DueFrom), optTime(p.DueBefore), bound + 1}, 3, bound)
	if err != nil {
		return readmodel.Count{}, fmt.Errorf("pgstore: count timers: %w", err)
	}
	return c, nil
}

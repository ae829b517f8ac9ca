package sqlitestore

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var (
	_ readmodel.TimerQuerier = (*Store)(nil)
	_ readmodel.QueryCounter = (*Store)(nil)
)

// instanceFilterArgs returns the arguments ?1 to ?6 of queryFilters and
// the attribute filters' name and value pairs; false when an attribute
// value can match nothing.
func instanceFilterArgs(p *readmodel.InstanceQuery) (args, attrArgs []any, ok bool) {
	attrs, ok := canon.AttributeFilter(p.Attributes)
	if !ok {
		return nil, nil, false
	}
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		attrArgs = append(attrArgs, name, attrs[name])
	}
	from, before := rangeMicros(p.UpdatedFrom, p.UpdatedBefore)
	return []any{p.SagaType, p.State, p.Status, p.KeyPrefix, from, before}, attrArgs, true
}

// rangeMicros is the range [from, before) in microseconds, open ends as
// the smallest and largest int64.
func rangeMicros(from, before time.Time) (int64, int64) {
	lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
	if !from.IsZero() {
		lo = micros(from)
	}
	if !before.IsZero() {
		hi = micros(before)
	}
	return lo, hi
}

// attributeFilters is the SQL of n attribute filters whose name and value
// are the parameters from ?first on.
func attributeFilters(n, first int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, `
  AND EXISTS (SELECT 1 FROM idem_saga_attributes a WHERE a.name = ?%d AND a.value = ?%d
    AND a.saga_type = idem_instances.saga_type AND a.key = idem_instances.key)`, first+2*i, first+2*i+1)
	}
	return b.String()
}

// countInstanceQuerySQL reads at most ?8 of the rows queryFilters
// selects; ?7 is Stuck.
const countInstanceQuerySQL = `
SELECT count(*) FROM (SELECT 1 FROM idem_instances
WHERE ` + queryFilters + `
  AND (NOT ?7 OR finished_at IS NULL)
LIMIT ?8)`

// CountInstanceQuery counts the instances p selects, reading at most
// bound+1 rows; see readmodel.QueryCounter. SQLite keeps no statistics to
// estimate from: above the bound, the count says only "more than bound".
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
	var n int
	q := fmt.Sprintf(countInstanceQuerySQL, attributeFilters(len(attrArgs)/2, 9))
	if err := s.rdb.QueryRowContext(ctx, q, args...).Scan(&n); err != nil {
		return readmodel.Count{}, fmt.Errorf("sqlitestore: count instances: %w", err)
	}
	return readmodel.BoundedCount(n, bound), nil
}

// The timers a TimerQuery selects: ?1 saga type (empty: any), ?2 and ?3
// the due range [from, before) in microseconds (open ends as the smallest
// and largest int64).
const timerFilters = `(?1 = '' OR saga_type = ?1) AND due_at >= ?2 AND due_at < ?3`

// The pages after a cursor and before one: ?4 due at, ?5 saga type, ?6
// key, ?7 name, ?8 limit. With no cursor, ?4 is the smallest int64 and the
// strings are empty, which sorts before every timer.
const (
	queryTimersSQL = `
SELECT ` + timerCols + ` FROM idem_timers
WHERE ` + timerFilters + `
  AND due_at >= ?4 AND (due_at, saga_type, key, name) > (?4, ?5, ?6, ?7)
ORDER BY due_at, saga_type, key, name
LIMIT ?8`
	queryTimersBeforeSQL = `
SELECT ` + timerCols + ` FROM idem_timers
WHERE ` + timerFilters + `
  AND due_at <= ?4 AND (due_at, saga_type, key, name) < (?4, ?5, ?6, ?7)
ORDER BY due_at DESC, saga_type DESC, key DESC, name DESC
LIMIT ?8`
	countTimerQuerySQL = `
SELECT count(*) FROM (SELECT 1 FROM idem_timers WHERE ` + timerFilters + ` LIMIT ?4)`
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
		return nil, fmt.Errorf("sqlitestore: query timers: %w", readmodel.ErrBothCursors)
	}
	q, c, due := queryTimersSQL, p.After, int64(math.MinInt64)
	if p.Before != nil {
		q, c = queryTimersBeforeSQL, p.Before
	}
	if c == nil {
		c = &readmodel.TimerCursor{}
	} else {
		due = micros(c.DueAt)
	}
	from, before := rangeMicros(p.DueFrom, p.DueBefore)
	rows, err := s.rdb.QueryContext(ctx, q, p.SagaType, from, before, due, c.SagaType, c.Key, c.Name, sqlq.Limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: query timers: %w", err)
	}
	raw, err := scanRawTimers(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: query timers: %w", err)
	}
	ts, err := decodeTimers(raw)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: query timers: %w", err)
	}
	if p.Before != nil {
		slices.Reverse(ts)
	}
	return ts, nil
}

// CountTimerQuery counts the timers p selects, reading at most bound+1
// rows; see readmodel.QueryCounter.
func (s *Store) CountTimerQuery(ctx context.Context, p *readmodel.TimerQuery, bound int) (readmodel.Count, error) {
	if err := s.check("count timers"); err != nil {
		return readmodel.Count{}, err
	}
	if p == nil {
		p = &readmodel.TimerQuery{}
	}
	from, before := rangeMicros(p.DueFrom, p.DueBefore)
	var n int
	if err := s.rdb.QueryRowContext(ctx, countTimerQuerySQL, p.SagaType, from, before, bound+1).Scan(&n); err != nil {
		return readmodel.Count{}, fmt.Errorf("sqlitestore: count timers: %w", err)
	}
	return readmodel.BoundedCount(n, bound), nil
}

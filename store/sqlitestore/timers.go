package sqlitestore

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/store"
)

// timersOfSQL reads one saga's timers through the primary key (saga_type,
// key, name).
const timersOfSQL = `SELECT ` + timerCols + ` FROM idem_timers
WHERE saga_type = ?1 AND key = ?2
ORDER BY due_at, name`

// timersOfKeySQL reads one key's timers in every saga type: a loose index
// scan of the primary key finds each saga type (one probe per type), and
// each type's timers of the key are one more probe.
const timersOfKeySQL = `
WITH RECURSIVE types(t) AS (
  SELECT (SELECT min(saga_type) FROM idem_timers)
  UNION ALL
  SELECT (SELECT min(saga_type) FROM idem_timers WHERE saga_type > t) FROM types WHERE t IS NOT NULL
)
SELECT ` + timerCols + ` FROM types CROSS JOIN idem_timers
WHERE saga_type = t AND key = ?1
ORDER BY due_at, saga_type, name`

// TimersOf returns the timers of saga k, or with an empty k.SagaType those
// of key k.Key in every saga type; see store.Store.
func (s *Store) TimersOf(ctx context.Context, k store.Key) ([]store.Timer, error) {
	if err := s.check("timers of saga"); err != nil {
		return nil, err
	}
	if k.Key == "" {
		return nil, nil
	}
	q, args := timersOfSQL, []any{k.SagaType, k.Key}
	if k.SagaType == "" {
		q, args = timersOfKeySQL, []any{k.Key}
	}
	rows, err := s.rdb.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: timers of %s/%s: %w", k.SagaType, k.Key, err)
	}
	raw, err := scanRawTimers(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: timers of %s/%s: %w", k.SagaType, k.Key, err)
	}
	ts, err := decodeTimers(raw)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: timers of %s/%s: %w", k.SagaType, k.Key, err)
	}
	return ts, nil
}

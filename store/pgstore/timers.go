package pgstore

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/store"
)

// timersOfSQL reads one saga's timers through the primary key (saga_type,
// key, name).
const timersOfSQL = `SELECT saga_type, key, name, due_at, envelope, body FROM idem_timers
WHERE saga_type = $1 AND key = $2 ORDER BY due_at, name COLLATE "C"`

// timersOfKeySQL reads one key's timers in every saga type: a loose index
// scan of the primary key finds each saga type (one probe per type), and
// each type's timers of the key are one more probe.
const timersOfKeySQL = `
WITH RECURSIVE types(t) AS (
  SELECT (SELECT min(saga_type) FROM idem_timers)
  UNION ALL
  SELECT (SELECT min(saga_type) FROM idem_timers WHERE saga_type > types.t) FROM types WHERE types.t IS NOT NULL
)
SELECT saga_type, key, name, due_at, envelope, body FROM types JOIN idem_timers ON saga_type = types.t
WHERE key = $1 ORDER BY due_at, saga_type COLLATE "C", name COLLATE "C"`

// TimersOf returns the timers of saga k, or with an empty k.SagaType those
// of key k.Key in every saga type; see store.Store.
func (s *Store) TimersOf(ctx context.Context, k store.Key) ([]store.Timer, error) {
	if err := s.check("timers of saga"); err != nil {
		return nil, err
	}
	if k.Key == "" || !representable(k.SagaType, k.Key) {
		return nil, nil // no stored timer has such a key
	}
	q, args := timersOfSQL, []any{k.SagaType, k.Key}
	if k.SagaType == "" {
		q, args = timersOfKeySQL, []any{k.Key}
	}
	rows, err := s.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("pgstore: timers of %s/%s: %w", k.SagaType, k.Key, translate(err))
	}
	ts, err := scanTimers(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: timers of %s/%s: %w", k.SagaType, k.Key, err)
	}
	return ts, nil
}

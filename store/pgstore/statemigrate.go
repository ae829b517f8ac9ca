package pgstore

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
)

var _ store.StateMigrator = (*Store)(nil)

// migrateStatesSQL moves up to $5 sagas of type $1 in state $2 to state
// $3 at $4, the first by key, locking them so that a unit of work that
// commits meanwhile waits and then fails its version check. It skips the
// sagas a unit of work in flight holds: waiting for them, in key order
// while a unit of work locks its batch in another, deadlocked both (and
// that unit of work loads, and so migrates, its sagas anyway). It returns
// each moved saga's key, new version and stored document.
const migrateStatesSQL = `
WITH batch AS (
  SELECT saga_type, key FROM idem_instances
  WHERE saga_type COLLATE "C" = $1 AND state COLLATE "C" = $2
  ORDER BY key COLLATE "C"
  LIMIT $5
  FOR UPDATE SKIP LOCKED
)
UPDATE idem_instances i
SET state = $3, version = i.version + 1, updated_at = $4
FROM batch b
WHERE i.saga_type = b.saga_type AND i.key = b.key AND i.state = $2
RETURNING i.key, i.version, i.data::text`

const countStateSQL = `SELECT count(*) FROM idem_instances WHERE saga_type COLLATE "C" = $1 AND state COLLATE "C" = $2`

// MigrateStates moves up to p.Limit sagas from p.From to p.To and
// journals each, in one transaction; see store.StateMigrator.
func (s *Store) MigrateStates(ctx context.Context, p *store.MigrateStatesParams) (int, error) {
	if err := s.check("migrate states"); err != nil {
		return 0, err
	}
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("pgstore: %w", err)
	}
	var n int
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		journal, err := moveStates(ctx, tx, p)
		if err != nil {
			return err
		}
		n = len(journal)
		b := &pgx.Batch{}
		if err := queueJournal(b, journal); err != nil {
			return err
		}
		if b.Len() == 0 {
			return nil
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return 0, fmt.Errorf("pgstore: migrate %s sagas from %q to %q: %w", p.SagaType, p.From, p.To, translate(err))
	}
	return n, nil
}

// moveStates runs migrateStatesSQL and returns the journal entries of the
// sagas it moved.
func moveStates(ctx context.Context, tx pgx.Tx, p *store.MigrateStatesParams) ([]store.JournalEntry, error) {
	rows, err := tx.Query(ctx, migrateStatesSQL, p.SagaType, p.From, p.To, p.At.UTC(), p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.JournalEntry
	for rows.Next() {
		var key, data string
		var version int64
		if err := rows.Scan(&key, &version, &data); err != nil {
			return nil, err
		}
		out = append(out, p.MigrationEntry(key, version, []byte(data)))
	}
	return out, rows.Err()
}

// CountState counts the sagas of sagaType stored in state; see
// store.StateMigrator.
func (s *Store) CountState(ctx context.Context, sagaType, state string) (int64, error) {
	if err := s.check("count state"); err != nil {
		return 0, err
	}
	if !store.StorableText(sagaType) || !store.StorableText(state) {
		return 0, nil
	}
	var n int64
	if err := s.pool.QueryRow(ctx, countStateSQL, sagaType, state).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: count %s sagas in %q: %w", sagaType, state, translate(err))
	}
	return n, nil
}

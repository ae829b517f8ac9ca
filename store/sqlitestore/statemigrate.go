package sqlitestore

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/store"
)

var _ store.StateMigrator = (*Store)(nil)

// selectStatesSQL reads the batch a migration moves: up to ?3 sagas of
// type ?1 in state ?2, the first by key.
const selectStatesSQL = `SELECT key, version, data FROM idem_instances
WHERE saga_type = ?1 AND state = ?2 ORDER BY key LIMIT ?3`

// moveStateSQL moves one saga of the batch, guarded on the state and the
// version read (the writer is the only one, so the guard never fails).
const moveStateSQL = `UPDATE idem_instances SET state = ?4, version = version + 1, updated_at = ?5
WHERE saga_type = ?1 AND key = ?2 AND state = ?3 AND version = ?6`

const countStateSQL = `SELECT count(*) FROM idem_instances WHERE saga_type = ?1 AND state = ?2`

// migrated is one saga of a migration's batch.
type migrated struct {
	key     string
	version int64
	data    []byte
}

// MigrateStates moves up to p.Limit sagas from p.From to p.To and
// journals each, in one write transaction; see store.StateMigrator.
func (s *Store) MigrateStates(ctx context.Context, p *store.MigrateStatesParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("sqlitestore: %w", err)
	}
	var n int
	err := s.write(ctx, "migrate states", 0, func(w *writer) error {
		batch, err := readBatch(w, p)
		if err != nil {
			return err
		}
		for _, m := range batch {
			if err := moveOne(w, p, m); err != nil {
				return err
			}
		}
		n = len(batch)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: migrate %s sagas from %q to %q: %w", p.SagaType, p.From, p.To, err)
	}
	return n, nil
}

// readBatch reads the sagas a call moves.
func readBatch(w *writer, p *store.MigrateStatesParams) ([]migrated, error) {
	rows, err := w.query(selectStatesSQL, p.SagaType, p.From, p.Limit)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []migrated
	for rows.Next() {
		var m migrated
		if err := rows.Scan(&m.key, &m.version, &m.data); err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, rows.Err()
}

// moveOne moves m and writes its journal entry.
func moveOne(w *writer, p *store.MigrateStatesParams, m migrated) error {
	k, err := w.exec(moveStateSQL, p.SagaType, m.key, p.From, p.To, micros(p.At), m.version)
	if err != nil {
		return err
	}
	if k != 1 {
		return fmt.Errorf("move %s/%q: %w", p.SagaType, m.key, store.ErrConflict)
	}
	j := p.MigrationEntry(m.key, m.version+1, m.data)
	args, err := journalArgs(&j)
	if err != nil {
		return err
	}
	_, err = w.exec(insertJournalSQL, args...)
	return err
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
	if err := s.rdb.QueryRowContext(ctx, countStateSQL, sagaType, state).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlitestore: count %s sagas in %q: %w", sagaType, state, err)
	}
	return n, nil
}

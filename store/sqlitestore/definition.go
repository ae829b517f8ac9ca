package sqlitestore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
)

var _ store.DefinitionStore = (*Store)(nil)

// recordDefinitionSQL upserts one definition at ?4 (Unix microseconds): a
// known one keeps its first seen and description, and its last seen moves
// forward only.
const recordDefinitionSQL = `
INSERT INTO idem_definitions (saga_type, fingerprint, description, first_seen, last_seen)
VALUES (?1, ?2, ?3, ?4, ?4)
ON CONFLICT (saga_type, fingerprint) DO UPDATE
SET last_seen = max(idem_definitions.last_seen, excluded.last_seen)`

// RecordDefinitions records defs at at in one transaction. A saga type or
// fingerprint that is not valid UTF-8 fails with an error wrapping
// store.ErrRejected, before anything is written.
func (s *Store) RecordDefinitions(ctx context.Context, at time.Time, defs []store.Definition) error {
	if err := sqlq.CheckDefinitions(defs, true); err != nil {
		return fmt.Errorf("sqlitestore: record definitions: %w", err)
	}
	defs = sqlq.UniqueDefinitions(defs)
	if len(defs) == 0 {
		return s.check("record definitions")
	}
	err := s.write(ctx, "record definitions", 0, func(w *writer) error {
		for _, d := range defs {
			desc := d.Description
			if desc == nil {
				desc = []byte{}
			}
			if _, err := w.exec(recordDefinitionSQL, d.SagaType, d.Fingerprint, desc, micros(at)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: record definitions: %w", err)
	}
	return nil
}

// Definitions returns the definitions of sagaType, the first seen first,
// with the replicas whose heartbeats name them.
func (s *Store) Definitions(ctx context.Context, sagaType string) ([]store.Definition, error) {
	if err := s.check("definitions"); err != nil {
		return nil, err
	}
	if sqlq.CheckDefinitions([]store.Definition{{SagaType: sagaType}}, true) != nil {
		return nil, nil // never recorded: not valid UTF-8
	}
	defs, err := s.readDefinitions(ctx, sagaType)
	if err == nil && len(defs) > 0 {
		var reps map[string]string
		if reps, err = s.replicaDefinitions(ctx, sagaType); err == nil {
			err = sqlq.AttachReplicas(defs, reps)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: definitions of %q: %w", sagaType, err)
	}
	return defs, nil
}

// readDefinitions reads the rows of sagaType.
func (s *Store) readDefinitions(ctx context.Context, sagaType string) ([]store.Definition, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT fingerprint, description, first_seen, last_seen FROM idem_definitions
WHERE saga_type = ?1 ORDER BY first_seen, fingerprint`, sagaType)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.Definition
	for rows.Next() {
		d := store.Definition{SagaType: sagaType}
		var first, last int64
		if err := rows.Scan(&d.Fingerprint, &d.Description, &first, &last); err != nil {
			return nil, err
		}
		d.FirstSeen, d.LastSeen = fromMicros(first), fromMicros(last)
		out = append(out, d)
	}
	return out, rows.Err()
}

// replicaDefinitions returns the definitions column of the replicas that
// may run sagaType (their column holds its JSON form), by replica ID.
func (s *Store) replicaDefinitions(ctx context.Context, sagaType string) (map[string]string, error) {
	rows, err := s.rdb.QueryContext(ctx, `SELECT id, definitions FROM idem_replicas WHERE instr(definitions, ?1) > 0`, sqlq.DefinitionsNeedle(sagaType))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, col string
		if err := rows.Scan(&id, &col); err != nil {
			return nil, err
		}
		out[id] = col
	}
	return out, rows.Err()
}

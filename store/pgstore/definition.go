package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
)

var _ store.DefinitionStore = (*Store)(nil)

// recordDefinitionsSQL upserts the definitions $1 (saga types), $2
// (fingerprints), $3 (descriptions) at $4: a known one keeps its first
// seen and description, and its last seen moves forward only.
const recordDefinitionsSQL = `
INSERT INTO idem_definitions (saga_type, fingerprint, description, first_seen, last_seen)
SELECT u.saga_type, u.fingerprint, u.description, $4, $4
FROM unnest($1::text[], $2::text[], $3::bytea[]) AS u(saga_type, fingerprint, description)
ON CONFLICT (saga_type, fingerprint) DO UPDATE
SET last_seen = greatest(idem_definitions.last_seen, excluded.last_seen)`

// RecordDefinitions records defs at at in one statement. A saga type or
// fingerprint with U+0000 or invalid UTF-8 fails with an error wrapping
// store.ErrRejected, before anything is sent.
func (s *Store) RecordDefinitions(ctx context.Context, at time.Time, defs []store.Definition) error {
	if err := s.check("record definitions"); err != nil {
		return err
	}
	if err := sqlq.CheckDefinitions(defs, false); err != nil {
		return fmt.Errorf("pgstore: record definitions: %w", err)
	}
	defs = sqlq.UniqueDefinitions(defs)
	if len(defs) == 0 {
		return nil
	}
	types, fps, descs := make([]string, len(defs)), make([]string, len(defs)), make([][]byte, len(defs))
	for i, d := range defs {
		types[i], fps[i], descs[i] = d.SagaType, d.Fingerprint, d.Description
		if descs[i] == nil {
			descs[i] = []byte{}
		}
	}
	if _, err := s.pool.Exec(ctx, recordDefinitionsSQL, types, fps, descs, at); err != nil {
		return fmt.Errorf("pgstore: record definitions: %w", translate(err))
	}
	return nil
}

// Definitions returns the definitions of sagaType, the first seen first,
// with the replicas whose heartbeats name them.
func (s *Store) Definitions(ctx context.Context, sagaType string) ([]store.Definition, error) {
	if err := s.check("definitions"); err != nil {
		return nil, err
	}
	if sqlq.CheckDefinitions([]store.Definition{{SagaType: sagaType}}, false) != nil {
		return nil, nil // never recorded: PostgreSQL cannot hold it
	}
	defs, err := s.readDefinitions(ctx, sagaType)
	if err != nil || len(defs) == 0 {
		return defs, err
	}
	reps, err := s.replicaDefinitions(ctx, sagaType)
	if err == nil {
		err = sqlq.AttachReplicas(defs, reps)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: definitions of %q: %w", sagaType, err)
	}
	return defs, nil
}

// readDefinitions reads the rows of sagaType.
func (s *Store) readDefinitions(ctx context.Context, sagaType string) ([]store.Definition, error) {
	rows, err := s.pool.Query(ctx, `SELECT fingerprint, description, first_seen, last_seen FROM idem_definitions
WHERE saga_type = $1 ORDER BY first_seen, fingerprint COLLATE "C"`, sagaType)
	if err != nil {
		return nil, fmt.Errorf("pgstore: definitions of %q: %w", sagaType, translate(err))
	}
	defer rows.Close()
	var out []store.Definition
	for rows.Next() {
		d := store.Definition{SagaType: sagaType}
		if err := rows.Scan(&d.Fingerprint, &d.Description, &d.FirstSeen, &d.LastSeen); err != nil {
			return nil, fmt.Errorf("pgstore: definitions of %q: %w", sagaType, translate(err))
		}
		normalizeTimes(&d.FirstSeen, &d.LastSeen)
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: definitions of %q: %w", sagaType, translate(err))
	}
	return out, nil
}

// replicaDefinitions returns the definitions column of the replicas that
// may run sagaType (their column holds its JSON form), by replica ID.
func (s *Store) replicaDefinitions(ctx context.Context, sagaType string) (map[string]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT id, definitions FROM idem_replicas WHERE strpos(definitions, $1) > 0`, sqlq.DefinitionsNeedle(sagaType))
	if err != nil {
		return nil, translate(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, col string
		if err := rows.Scan(&id, &col); err != nil {
			return nil, translate(err)
		}
		out[id] = col
	}
	if err := rows.Err(); err != nil {
		return nil, translate(err)
	}
	return out, nil
}

package pgstore

import (
	"context"
	"fmt"
	"time"
)

// readIndexes are the indexes of idem_instances that only operators' reads
// use: ListInstances, QueryInstances and CountInstances (the console, the
// admin API, idem sagas ls), never the engine. Migration 012 dropped them
// from the schema, so that a deployment that never reads its instances
// that way does not maintain them on every write; the first such read
// builds them (buildReadIndexes).
var readIndexes = []struct{ name, columns string }{
	// The stuck view: active instances, least recently updated first.
	{"idem_instances_stuck", `(updated_at, saga_type COLLATE "C", key COLLATE "C") WHERE finished_at IS NULL`},
	// Keyset paging in byte order, as the other stores order: the primary
	// key, in the database's collation, cannot serve it unless that is "C".
	{"idem_instances_keyset", `(saga_type COLLATE "C", key COLLATE "C")`},
	// Instances of one type in one state, in key order, and their counts.
	{"idem_instances_type_state", `(saga_type COLLATE "C", state COLLATE "C", key COLLATE "C")`},
}

// readIndexRetry is how long after a failed build of readIndexes a read
// starts another.
const readIndexRetry = time.Minute

// buildReadIndexes starts, at the first operator's read of instances, the
// background build of readIndexes, and again at a read readIndexRetry or
// more after a build that failed. The read does not wait for it: without
// the indexes it returns the same rows, more slowly on a large table. The
// build runs until it ends or Close.
func (s *Store) buildReadIndexes() {
	s.lmu.Lock() // Close waits for lwg after taking lmu
	defer s.lmu.Unlock()
	if s.readIndexed || s.readIndexing || s.closed.Load() || time.Now().Before(s.readIndexAfter) {
		return
	}
	s.readIndexing = true
	s.lwg.Add(1)
	go func() {
		defer s.lwg.Done()
		err := s.createReadIndexes(s.bg)
		s.lmu.Lock()
		s.readIndexing, s.readIndexed = false, err == nil
		if err != nil {
			s.readIndexAfter = time.Now().Add(readIndexRetry)
		}
		s.lmu.Unlock()
		if err != nil && s.bg.Err() == nil {
			s.log.Warn("could not build the indexes of the instance lists (console, admin API, idem sagas ls); the lists stay correct, reading more rows, and a list a minute or more from now tries again",
				"error", err)
		}
	}()
}

// createReadIndexes builds the missing readIndexes with CREATE INDEX
// CONCURRENTLY, which does not block the engine's writes. A build that
// failed or was cancelled leaves an invalid index behind, which writes
// still maintain: one that no session is building
// (pg_stat_progress_create_index) is dropped and built again. Two
// processes that build the same index at once: one fails, and its next
// read finds the index built or being built.
func (s *Store) createReadIndexes(ctx context.Context) error {
	for _, ix := range readIndexes {
		var valid, building bool
		err := s.pool.QueryRow(ctx, `
SELECT coalesce(bool_and(i.indisvalid), true),
       coalesce(bool_or(EXISTS (SELECT 1 FROM pg_stat_progress_create_index p WHERE p.index_relid = c.oid)), false)
FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND c.relname = $1`, ix.name).Scan(&valid, &building)
		if err != nil {
			return fmt.Errorf("pgstore: build read index %s: %w", ix.name, translate(err))
		}
		if building {
			return fmt.Errorf("pgstore: build read index %s: another session is building it", ix.name)
		}
		if !valid {
			if _, err := s.pool.Exec(ctx, `DROP INDEX CONCURRENTLY IF EXISTS `+ix.name); err != nil {
				return fmt.Errorf("pgstore: drop invalid read index %s: %w", ix.name, translate(err))
			}
		}
		if _, err := s.pool.Exec(ctx, `CREATE INDEX CONCURRENTLY IF NOT EXISTS `+ix.name+` ON idem_instances `+ix.columns); err != nil {
			return fmt.Errorf("pgstore: build read index %s: %w", ix.name, translate(err))
		}
	}
	return nil
}

package sqlitestore

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ store.ReplicaRegistry = (*Store)(nil)

// heartbeatSQL replaces the replica unless the stored beat is later.
const heartbeatSQL = `
INSERT INTO idem_replicas (id, host, version, started_at, config, lanes, consumers, last_batch_at, lag_ns, interval_ns, beat_at, stopped_at, definitions)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, version = excluded.version, started_at = excluded.started_at, config = excluded.config,
    lanes = excluded.lanes, consumers = excluded.consumers, last_batch_at = excluded.last_batch_at, lag_ns = excluded.lag_ns,
    interval_ns = excluded.interval_ns, beat_at = excluded.beat_at, stopped_at = excluded.stopped_at, definitions = excluded.definitions
WHERE excluded.beat_at >= idem_replicas.beat_at`

const replicaCols = `id, host, version, started_at, config, lanes, consumers, last_batch_at, lag_ns, interval_ns, beat_at, stopped_at, definitions`

// Heartbeat creates or replaces the replica r.ID, unless the stored one has
// a later BeatAt.
func (s *Store) Heartbeat(ctx context.Context, r *store.Replica) error {
	cfg, err := sqlq.ReplicaConfigJSON(r.Config)
	if err != nil {
		return fmt.Errorf("sqlitestore: heartbeat %q: %w", r.ID, err)
	}
	defs, err := sqlq.ReplicaConfigJSON(r.Definitions)
	if err != nil {
		return fmt.Errorf("sqlitestore: heartbeat %q: %w", r.ID, err)
	}
	err = s.write(ctx, "heartbeat", 0, func(w *writer) error {
		_, err := w.exec(heartbeatSQL, r.ID, r.Host, r.Version, micros(r.StartedAt), cfg, r.Lanes, r.Consumers,
			nullMicros(r.LastBatchAt), int64(r.Lag), int64(r.Interval), micros(r.BeatAt), nullMicros(r.StoppedAt), defs)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: heartbeat %q: %w", r.ID, err)
	}
	return nil
}

// Replicas returns at most limit replicas, the most recently started first.
func (s *Store) Replicas(ctx context.Context, limit int) ([]store.Replica, error) {
	if err := s.check("replicas"); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+replicaCols+` FROM idem_replicas ORDER BY started_at DESC, id LIMIT ?1`, sqlq.Limit(limit))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: replicas: %w", err)
	}
	out, err := scanReplicas(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: replicas: %w", err)
	}
	return out, nil
}

// PruneReplicas deletes the replicas whose last beat is before before.
func (s *Store) PruneReplicas(ctx context.Context, before time.Time) (int, error) {
	var n int64
	err := s.write(ctx, "prune replicas", 0, func(w *writer) error {
		var err error
		n, err = w.exec(`DELETE FROM idem_replicas WHERE beat_at < ?1`, micros(before))
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: prune replicas: %w", err)
	}
	return int(n), nil
}

// RemoveReplicas deletes the replicas named by marks whose last beat is
// still the mark's, in one transaction.
func (s *Store) RemoveReplicas(ctx context.Context, marks []store.ReplicaMark) (int, error) {
	var n int64
	err := s.write(ctx, "remove replicas", 0, func(w *writer) error {
		n = 0
		for _, m := range marks {
			k, err := w.exec(`DELETE FROM idem_replicas WHERE id = ?1 AND beat_at = ?2`, m.ID, micros(m.BeatAt))
			if err != nil {
				return err
			}
			n += k
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: remove replicas: %w", err)
	}
	return int(n), nil
}

func scanReplicas(rows *sql.Rows) ([]store.Replica, error) {
	defer rows.Close()
	var out []store.Replica
	for rows.Next() {
		var r store.Replica
		var started, beat, lag, interval int64
		var cfg, defs string
		var lastBatch, stopped sql.NullInt64
		if err := rows.Scan(&r.ID, &r.Host, &r.Version, &started, &cfg, &r.Lanes, &r.Consumers, &lastBatch, &lag, &interval, &beat, &stopped, &defs); err != nil {
			return nil, err
		}
		c, err := sqlq.DecodeReplicaConfig([]byte(cfg))
		if err != nil {
			return nil, fmt.Errorf("replica %q: %w", r.ID, err)
		}
		d, err := sqlq.DecodeReplicaConfig([]byte(defs))
		if err != nil {
			return nil, fmt.Errorf("replica %q definitions: %w", r.ID, err)
		}
		r.Config, r.Definitions, r.Lag, r.Interval = c, d, time.Duration(lag), time.Duration(interval)
		r.StartedAt, r.BeatAt, r.LastBatchAt, r.StoppedAt = fromMicros(started), fromMicros(beat), fromNullMicros(lastBatch), fromNullMicros(stopped)
		out = append(out, r)
	}
	return out, rows.Err()
}

var _ readmodel.ReplicaCounter = (*Store)(nil)

// countReplicasSQL counts the replicas by state at ?1 (0 stopped, 1 alive,
// 2 gone; times in microseconds), a gone one whose last beat is before an
// alive one's start counted as replaced. ?2 is store.ReplicaGoneBeats and
// ?3 the default interval in nanoseconds.
const countReplicasSQL = `
WITH r AS (
  SELECT started_at, beat_at,
    CASE WHEN stopped_at IS NOT NULL THEN 0
         WHEN (?1 - beat_at) * 1000 > ?2 * (CASE WHEN interval_ns > 0 THEN interval_ns ELSE ?3 END) THEN 2
         ELSE 1 END AS st
  FROM idem_replicas),
live AS (SELECT max(started_at) AS started FROM r WHERE st = 1)
SELECT coalesce(sum(st = 1), 0),
       coalesce(sum(st = 0), 0),
       coalesce(sum(st = 2 AND NOT coalesce(r.beat_at < live.started, 0)), 0),
       coalesce(sum(st = 2 AND coalesce(r.beat_at < live.started, 0)), 0)
FROM r, live`

// CountReplicas counts every replica record by its state at now, in one
// statement.
func (s *Store) CountReplicas(ctx context.Context, now time.Time) (*readmodel.ReplicaCounts, error) {
	if err := s.check("count replicas"); err != nil {
		return nil, err
	}
	var c readmodel.ReplicaCounts
	err := s.rdb.QueryRowContext(ctx, countReplicasSQL, micros(now), int64(store.ReplicaGoneBeats), int64(store.DefaultReplicaInterval)).
		Scan(&c.Alive, &c.Stopped, &c.Gone, &c.Replaced)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: count replicas: %w", err)
	}
	return &c, nil
}

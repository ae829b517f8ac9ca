package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

var _ store.ReplicaRegistry = (*Store)(nil)

// heartbeatSQL replaces the replica unless the stored beat is later.
const heartbeatSQL = `
INSERT INTO idem_replicas (id, host, version, started_at, config, lanes, consumers, last_batch_at, lag_ns, interval_ns, beat_at, stopped_at, definitions)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
ON CONFLICT (id) DO UPDATE
SET host = excluded.host, version = excluded.version, started_at = excluded.started_at, config = excluded.config,
    lanes = excluded.lanes, consumers = excluded.consumers, last_batch_at = excluded.last_batch_at, lag_ns = excluded.lag_ns,
    interval_ns = excluded.interval_ns, beat_at = excluded.beat_at, stopped_at = excluded.stopped_at, definitions = excluded.definitions
WHERE excluded.beat_at >= idem_replicas.beat_at`

const replicaCols = `id, host, version, started_at, config, lanes, consumers, last_batch_at, lag_ns, interval_ns, beat_at, stopped_at, definitions`

// Heartbeat creates or replaces the replica r.ID, unless the stored one has
// a later BeatAt. A string PostgreSQL cannot store (U+0000, invalid UTF-8)
// fails with an error wrapping store.ErrRejected.
func (s *Store) Heartbeat(ctx context.Context, r *store.Replica) error {
	if err := s.check("heartbeat"); err != nil {
		return err
	}
	cfg, err := sqlq.ReplicaConfigJSON(r.Config)
	if err != nil {
		return fmt.Errorf("pgstore: heartbeat %q: %w", r.ID, err)
	}
	defs, err := sqlq.ReplicaConfigJSON(r.Definitions)
	if err != nil {
		return fmt.Errorf("pgstore: heartbeat %q: %w", r.ID, err)
	}
	_, err = s.pool.Exec(ctx, heartbeatSQL, r.ID, r.Host, r.Version, r.StartedAt, cfg, r.Lanes, r.Consumers,
		nullTime(r.LastBatchAt), int64(r.Lag), int64(r.Interval), r.BeatAt, nullTime(r.StoppedAt), defs)
	if err != nil {
		return fmt.Errorf("pgstore: heartbeat %q: %w", r.ID, translate(err))
	}
	return nil
}

// Replicas returns at most limit replicas, the most recently started first.
func (s *Store) Replicas(ctx context.Context, limit int) ([]store.Replica, error) {
	if err := s.check("replicas"); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+replicaCols+` FROM idem_replicas ORDER BY started_at DESC, id COLLATE "C" LIMIT $1`, sqlq.Limit(limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: replicas: %w", translate(err))
	}
	out, err := scanReplicas(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: replicas: %w", translate(err))
	}
	return out, nil
}

// PruneReplicas deletes the replicas whose last beat is before before.
func (s *Store) PruneReplicas(ctx context.Context, before time.Time) (int, error) {
	if err := s.check("prune replicas"); err != nil {
		return 0, err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM idem_replicas WHERE beat_at < $1`, before)
	if err != nil {
		return 0, fmt.Errorf("pgstore: prune replicas: %w", translate(err))
	}
	return int(tag.RowsAffected()), nil
}

// RemoveReplicas deletes the replicas named by marks whose last beat is
// still the mark's, in one statement.
func (s *Store) RemoveReplicas(ctx context.Context, marks []store.ReplicaMark) (int, error) {
	if err := s.check("remove replicas"); err != nil {
		return 0, err
	}
	if len(marks) == 0 {
		return 0, nil
	}
	ids, beats := make([]string, len(marks)), make([]time.Time, len(marks))
	for i, m := range marks {
		ids[i], beats[i] = m.ID, m.BeatAt
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM idem_replicas r USING unnest($1::text[], $2::timestamptz[]) AS m(id, beat_at)
WHERE r.id = m.id AND r.beat_at = m.beat_at`, ids, beats)
	if err != nil {
		return 0, fmt.Errorf("pgstore: remove replicas: %w", translate(err))
	}
	return int(tag.RowsAffected()), nil
}

func nullTime(t time.Time) pgtype.Timestamptz { return pgtype.Timestamptz{Time: t, Valid: !t.IsZero()} }

func scanReplicas(rows pgx.Rows) ([]store.Replica, error) {
	defer rows.Close()
	var out []store.Replica
	for rows.Next() {
		var r store.Replica
		var cfg, defs string
		var lag, interval int64
		var lastBatch, stopped pgtype.Timestamptz
		if err := rows.Scan(&r.ID, &r.Host, &r.Version, &r.StartedAt, &cfg, &r.Lanes, &r.Consumers, &lastBatch, &lag, &interval, &r.BeatAt, &stopped, &defs); err != nil {
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
		if lastBatch.Valid {
			r.LastBatchAt = lastBatch.Time
		}
		if stopped.Valid {
			r.StoppedAt = stopped.Time
		}
		normalizeTimes(&r.StartedAt, &r.BeatAt, &r.LastBatchAt, &r.StoppedAt)
		out = append(out, r)
	}
	return out, rows.Err()
}

var _ readmodel.ReplicaCounter = (*Store)(nil)

// countReplicasSQL counts the replicas by state at $1 (0 stopped, 1 alive,
// 2 gone), a gone one whose last beat is before an alive one's start
// counted as replaced. $2 is store.ReplicaGoneBeats and $3 the default
// interval in nanoseconds.
const countReplicasSQL = `
WITH r AS (
  SELECT started_at, beat_at,
    CASE WHEN stopped_at IS NOT NULL THEN 0
         WHEN $1::timestamptz - beat_at > interval '1 microsecond' * ($2::bigint * (CASE WHEN interval_ns > 0 THEN interval_ns ELSE $3::bigint END) / 1000) THEN 2
         ELSE 1 END AS st
  FROM idem_replicas),
live AS (SELECT max(started_at) AS started FROM r WHERE st = 1)
SELECT count(*) FILTER (WHERE st = 1),
       count(*) FILTER (WHERE st = 0),
       count(*) FILTER (WHERE st = 2 AND NOT coalesce(r.beat_at < live.started, false)),
       count(*) FILTER (WHERE st = 2 AND coalesce(r.beat_at < live.started, false))
FROM r, live`

// CountReplicas counts every replica record by its state at now, in one
// statement.
func (s *Store) CountReplicas(ctx context.Context, now time.Time) (*readmodel.ReplicaCounts, error) {
	if err := s.check("count replicas"); err != nil {
		return nil, err
	}
	var c readmodel.ReplicaCounts
	err := s.pool.QueryRow(ctx, countReplicasSQL, now, int64(store.ReplicaGoneBeats), int64(store.DefaultReplicaInterval)).
		Scan(&c.Alive, &c.Stopped, &c.Gone, &c.Replaced)
	if err != nil {
		return nil, fmt.Errorf("pgstore: count replicas: %w", translate(err))
	}
	return &c, nil
}

-- Replica heartbeats (store.ReplicaRegistry): one row per engine run,
-- replaced by each of its beats. Times are Unix microseconds, durations
-- nanoseconds; config is a JSON object of strings.
CREATE TABLE idem_replicas (
    id            TEXT    NOT NULL PRIMARY KEY,
    host          TEXT    NOT NULL,
    version       TEXT    NOT NULL,
    started_at    INTEGER NOT NULL,
    config        TEXT    NOT NULL,
    lanes         INTEGER NOT NULL,
    consumers     INTEGER NOT NULL,
    last_batch_at INTEGER,
    lag_ns        INTEGER NOT NULL,
    interval_ns   INTEGER NOT NULL,
    beat_at       INTEGER NOT NULL,
    stopped_at    INTEGER
) WITHOUT ROWID;
CREATE INDEX idem_replicas_started ON idem_replicas (started_at DESC, id);

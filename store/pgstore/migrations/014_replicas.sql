-- Replica heartbeats (store.ReplicaRegistry): one row per engine run,
-- replaced by each of its beats. Durations are nanoseconds; config is a
-- JSON object of strings kept as text (jsonb refuses U+0000).
CREATE TABLE IF NOT EXISTS idem_replicas (
    id            text        PRIMARY KEY,
    host          text        NOT NULL,
    version       text        NOT NULL,
    started_at    timestamptz NOT NULL,
    config        text        NOT NULL,
    lanes         integer     NOT NULL,
    consumers     integer     NOT NULL,
    last_batch_at timestamptz,
    lag_ns        bigint      NOT NULL,
    interval_ns   bigint      NOT NULL,
    beat_at       timestamptz NOT NULL,
    stopped_at    timestamptz
);
CREATE INDEX IF NOT EXISTS idem_replicas_started ON idem_replicas (started_at DESC, id COLLATE "C");

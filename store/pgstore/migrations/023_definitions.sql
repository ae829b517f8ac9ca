-- Version 23, the definition registry (store.DefinitionStore): one row per
-- saga type and fingerprint of its definition, with the description first
-- recorded (opaque bytes) and when engines first and last recorded it. The
-- replicas that run a definition are those whose heartbeat lists it in
-- idem_replicas.definitions (a JSON object of saga type to fingerprint,
-- kept as text as config is), so the link goes with the replica's record.
CREATE TABLE IF NOT EXISTS idem_definitions (
    saga_type   text        NOT NULL,
    fingerprint text        NOT NULL,
    description bytea       NOT NULL,
    first_seen  timestamptz NOT NULL,
    last_seen   timestamptz NOT NULL,
    PRIMARY KEY (saga_type, fingerprint)
);
ALTER TABLE idem_replicas ADD COLUMN IF NOT EXISTS definitions text NOT NULL DEFAULT '{}';

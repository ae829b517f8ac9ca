-- The definition registry (store.DefinitionStore): one row per saga type
-- and fingerprint of its definition, with the description first recorded
-- (opaque bytes) and when engines first and last recorded it (Unix
-- microseconds). The replicas that run a definition are those whose
-- heartbeat lists it in idem_replicas.definitions (a JSON object of saga
-- type to fingerprint), so the link goes with the replica's record.
CREATE TABLE idem_definitions (
    saga_type   TEXT    NOT NULL,
    fingerprint TEXT    NOT NULL,
    description BLOB    NOT NULL,
    first_seen  INTEGER NOT NULL,
    last_seen   INTEGER NOT NULL,
    PRIMARY KEY (saga_type, fingerprint)
) WITHOUT ROWID;
ALTER TABLE idem_replicas ADD COLUMN definitions TEXT NOT NULL DEFAULT '{}';

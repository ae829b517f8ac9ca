-- Idem schema, version 1, for SQLite. Times are INTEGER microseconds since
-- the Unix epoch (UTC); JSON is TEXT; message bodies are BLOB. Tables are
-- STRICT, so a value of the wrong type is refused instead of stored.

CREATE TABLE idem_instances (
    saga_type      TEXT    NOT NULL,
    key            TEXT    NOT NULL,
    state          TEXT    NOT NULL,
    data           TEXT    NOT NULL,
    schema_version INTEGER NOT NULL,
    version        INTEGER NOT NULL,
    timers         TEXT,
    created_at     INTEGER NOT NULL,
    updated_at     INTEGER NOT NULL,
    finished_at    INTEGER,
    PRIMARY KEY (saga_type, key)
) STRICT, WITHOUT ROWID;
-- The sweeper's path: finished instances by age.
CREATE INDEX idem_instances_finished ON idem_instances (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE idem_inbox (
    saga_type    TEXT    NOT NULL,
    key          TEXT    NOT NULL,
    message_id   TEXT    NOT NULL,
    processed_at INTEGER NOT NULL,
    PRIMARY KEY (saga_type, key, message_id)
) STRICT, WITHOUT ROWID;
CREATE INDEX idem_inbox_processed ON idem_inbox (processed_at);

CREATE TABLE idem_outbox (
    seq         INTEGER PRIMARY KEY,
    id          TEXT    NOT NULL UNIQUE,
    envelope    TEXT    NOT NULL,
    body        BLOB    NOT NULL,
    created_at  INTEGER NOT NULL,
    sent_at     INTEGER,
    lease_until INTEGER
) STRICT;
CREATE INDEX idem_outbox_unsent ON idem_outbox (created_at, seq) WHERE sent_at IS NULL;
CREATE INDEX idem_outbox_sent ON idem_outbox (sent_at) WHERE sent_at IS NOT NULL;

CREATE TABLE idem_timers (
    saga_type   TEXT    NOT NULL,
    key         TEXT    NOT NULL,
    name        TEXT    NOT NULL,
    due_at      INTEGER NOT NULL,
    envelope_id TEXT    NOT NULL,
    envelope    TEXT    NOT NULL,
    body        BLOB    NOT NULL,
    lease_until INTEGER,
    PRIMARY KEY (saga_type, key, name)
) STRICT, WITHOUT ROWID;
CREATE INDEX idem_timers_due ON idem_timers (due_at);

-- AUTOINCREMENT: ids never go back, even after the sweeper deleted the
-- newest rows, so id order is commit order.
CREATE TABLE idem_journal (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    saga_type  TEXT    NOT NULL,
    key        TEXT    NOT NULL,
    raw_key    TEXT    NOT NULL DEFAULT '',
    message_id TEXT    NOT NULL,
    event_type TEXT    NOT NULL,
    from_state TEXT    NOT NULL,
    to_state   TEXT    NOT NULL,
    version    INTEGER NOT NULL,
    at         INTEGER NOT NULL
) STRICT;
CREATE INDEX idem_journal_saga ON idem_journal (saga_type, key, id);

-- The journal is append-only. Only the sweeper, deleting the journal of a
-- finished saga past retention, may delete rows: it sets sweeping to 1 in
-- its transaction and back to 0 before it commits, so no other connection
-- ever sees 1. Nothing may update a row.
CREATE TABLE idem_journal_guard (
    id       INTEGER PRIMARY KEY CHECK (id = 1),
    sweeping INTEGER NOT NULL CHECK (sweeping IN (0, 1))
) STRICT;
INSERT INTO idem_journal_guard (id, sweeping) VALUES (1, 0);

CREATE TRIGGER idem_journal_no_update BEFORE UPDATE ON idem_journal
BEGIN
    SELECT RAISE(ABORT, 'idem_journal is append-only: UPDATE refused');
END;

CREATE TRIGGER idem_journal_no_delete BEFORE DELETE ON idem_journal
WHEN (SELECT sweeping FROM idem_journal_guard WHERE id = 1) IS NOT 1
BEGIN
    SELECT RAISE(ABORT, 'idem_journal is append-only: DELETE refused');
END;

CREATE TABLE idem_dead_letters (
    id              TEXT    PRIMARY KEY,
    envelope        TEXT    NOT NULL,
    body            BLOB    NOT NULL,
    reason          TEXT    NOT NULL,
    error           TEXT    NOT NULL,
    saga_type       TEXT    NOT NULL DEFAULT '',
    key             TEXT    NOT NULL DEFAULT '',
    attempts        INTEGER NOT NULL,
    first_failed_at INTEGER NOT NULL,
    last_failed_at  INTEGER NOT NULL
) STRICT, WITHOUT ROWID;

-- The transactional queue: sqlitestore is also a transport. AUTOINCREMENT:
-- a sequence number is never reused, so a late settlement of a deleted row
-- cannot be mistaken for a lost lease on a newer one.
CREATE TABLE idem_queue (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT    NOT NULL,
    envelope   TEXT    NOT NULL,
    body       BLOB    NOT NULL,
    visible_at INTEGER NOT NULL,
    attempt    INTEGER NOT NULL DEFAULT 0,
    token      TEXT
) STRICT;
CREATE INDEX idem_queue_visible ON idem_queue (visible_at, seq);

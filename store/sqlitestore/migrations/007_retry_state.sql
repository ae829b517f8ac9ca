-- Retry state (issue 25): one row per message the engine gave back to its
-- transport after a failure, written only on failure and deleted in the
-- commit that applies or dead-letters the message (pgstore's 012).
CREATE TABLE IF NOT EXISTS idem_retries (
    id              TEXT    NOT NULL PRIMARY KEY,
    saga_type       TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    message_id      TEXT    NOT NULL,
    message_type    TEXT    NOT NULL,
    attempts        INTEGER NOT NULL,
    error           TEXT    NOT NULL,
    first_failed_at INTEGER NOT NULL,
    last_failed_at  INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS idem_retries_of ON idem_retries (saga_type, key, first_failed_at, id);
CREATE INDEX IF NOT EXISTS idem_retries_by_first ON idem_retries (first_failed_at, id);

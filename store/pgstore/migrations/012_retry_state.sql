-- Version 12: retry state (issue 25). One row per message the engine gave
-- back to its transport after a failure, written only on failure and
-- deleted in the commit that applies or dead-letters the message. IDs
-- compare in byte order (COLLATE "C"), as the other stores page them.
CREATE TABLE IF NOT EXISTS idem_retries (
    id              text COLLATE "C" PRIMARY KEY,
    saga_type       text        NOT NULL,
    key             text        NOT NULL,
    message_id      text        NOT NULL,
    message_type    text        NOT NULL,
    attempts        integer     NOT NULL,
    error           text        NOT NULL,
    first_failed_at timestamptz NOT NULL,
    last_failed_at  timestamptz NOT NULL,
    next_attempt_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS idem_retries_of ON idem_retries (saga_type, key, first_failed_at, id);
CREATE INDEX IF NOT EXISTS idem_retries_by_first ON idem_retries (first_failed_at, id);

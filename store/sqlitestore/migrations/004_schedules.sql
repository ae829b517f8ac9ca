-- Recurring schedules (idem.Engine.Every and Cron). Times are Unix
-- microseconds. The engine advances next_due and publishes the tick's
-- message in one write transaction, guarded by the next_due it read.
CREATE TABLE idem_schedules (
    name       TEXT    NOT NULL PRIMARY KEY,
    spec       TEXT    NOT NULL,
    missed     TEXT    NOT NULL,
    grace      INTEGER NOT NULL, -- nanoseconds
    envelope   TEXT    NOT NULL,
    body       BLOB    NOT NULL,
    next_due   INTEGER NOT NULL,
    paused     INTEGER NOT NULL DEFAULT 0,
    last_tick  INTEGER,
    updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE INDEX idem_schedules_due ON idem_schedules (next_due) WHERE paused = 0;

-- Recurring schedules (idem.Engine.Every and Cron). The engine advances
-- next_due and publishes the tick's message in one transaction; the
-- advance is guarded by the next_due it read (idem_expect), so a tick is
-- claimed by one replica only.
CREATE TABLE IF NOT EXISTS idem_schedules (
    name       text        PRIMARY KEY,
    spec       text        NOT NULL,
    missed     text        NOT NULL,
    grace      bigint      NOT NULL, -- nanoseconds
    envelope   jsonb       NOT NULL,
    body       bytea       NOT NULL,
    next_due   timestamptz NOT NULL,
    paused     boolean     NOT NULL DEFAULT false,
    last_tick  timestamptz,
    updated_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS idem_schedules_due ON idem_schedules (next_due) WHERE NOT paused;

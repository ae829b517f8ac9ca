-- Idem schema, version 1. Runs with search_path set to the store's schema.

CREATE TABLE idem_instances (
    saga_type      text        NOT NULL,
    key            text        NOT NULL,
    state          text        NOT NULL,
    data           jsonb       NOT NULL,
    schema_version integer     NOT NULL,
    version        bigint      NOT NULL,
    timers         jsonb,
    created_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL,
    finished_at    timestamptz,
    PRIMARY KEY (saga_type, key)
);
-- The sweeper's path: finished instances by age.
CREATE INDEX idem_instances_finished ON idem_instances (finished_at) WHERE finished_at IS NOT NULL;

CREATE TABLE idem_inbox (
    saga_type    text        NOT NULL,
    key          text        NOT NULL,
    message_id   text        NOT NULL,
    processed_at timestamptz NOT NULL,
    PRIMARY KEY (saga_type, key, message_id)
);
CREATE INDEX idem_inbox_processed ON idem_inbox (processed_at);

CREATE TABLE idem_outbox (
    id          text        PRIMARY KEY,
    seq         bigserial   NOT NULL,
    envelope    jsonb       NOT NULL,
    body        bytea       NOT NULL,
    created_at  timestamptz NOT NULL,
    sent_at     timestamptz,
    lease_until timestamptz
);
CREATE INDEX idem_outbox_unsent ON idem_outbox (created_at, seq) WHERE sent_at IS NULL;
CREATE INDEX idem_outbox_sent ON idem_outbox (sent_at) WHERE sent_at IS NOT NULL;

CREATE TABLE idem_timers (
    saga_type   text        NOT NULL,
    key         text        NOT NULL,
    name        text        NOT NULL,
    due_at      timestamptz NOT NULL,
    envelope    jsonb       NOT NULL,
    body        bytea       NOT NULL,
    lease_until timestamptz,
    PRIMARY KEY (saga_type, key, name)
);
CREATE INDEX idem_timers_due ON idem_timers (due_at);

CREATE TABLE idem_journal (
    id         bigserial   PRIMARY KEY,
    saga_type  text        NOT NULL,
    key        text        NOT NULL,
    raw_key    text        NOT NULL DEFAULT '',
    message_id text        NOT NULL,
    event_type text        NOT NULL,
    from_state text        NOT NULL,
    to_state   text        NOT NULL,
    version    bigint      NOT NULL,
    at         timestamptz NOT NULL
);
CREATE INDEX idem_journal_saga ON idem_journal (saga_type, key, id);

-- The journal is append-only. Only the sweeper, deleting the journal of a
-- finished saga past retention, may delete rows: it sets idem.sweeping in
-- its transaction. Nothing may update a row.
CREATE FUNCTION idem_journal_guard() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' AND current_setting('idem.sweeping', true) = 'on' THEN
        RETURN OLD;
    END IF;
    RAISE EXCEPTION 'idem_journal is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
CREATE TRIGGER idem_journal_append_only
    BEFORE UPDATE OR DELETE ON idem_journal
    FOR EACH ROW EXECUTE FUNCTION idem_journal_guard();

CREATE TABLE idem_dead_letters (
    id              text        PRIMARY KEY,
    envelope        jsonb       NOT NULL,
    body            bytea       NOT NULL,
    reason          text        NOT NULL,
    error           text        NOT NULL,
    saga_type       text        NOT NULL DEFAULT '',
    key             text        NOT NULL DEFAULT '',
    attempts        integer     NOT NULL,
    first_failed_at timestamptz NOT NULL,
    last_failed_at  timestamptz NOT NULL
);

-- The transactional queue: pgstore is also a transport.
CREATE TABLE idem_queue (
    seq            bigserial   PRIMARY KEY,
    id             text        NOT NULL,
    envelope       jsonb       NOT NULL,
    body           bytea       NOT NULL,
    visible_at     timestamptz NOT NULL,
    attempt        integer     NOT NULL DEFAULT 0,
    token          text
);
CREATE INDEX idem_queue_visible ON idem_queue (visible_at, seq);

-- Raises when a guarded write touched an unexpected number of rows, so that
-- a pipelined COMMIT never commits a partial unit of work. ID001 is an
-- optimistic-concurrency conflict, ID002 a lost queue lease.
CREATE FUNCTION idem_expect(got bigint, want bigint, what text) RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    IF got <> want THEN
        RAISE EXCEPTION 'idem: % matched % rows, expected %', what, got, want
            USING ERRCODE = CASE WHEN what = 'lease' THEN 'ID002' ELSE 'ID001' END;
    END IF;
    RETURN got;
END;
$$;

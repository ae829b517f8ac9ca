-- Version 10: a dead letter keeps its history. A replay no longer deletes
-- it: idem_dead_letter_replays records each replay and its outcome, and
-- recording the dead letter again (the same message failed again) keeps
-- the first failure's reason and error and, when it comes from a replayed
-- copy, settles the pending replay as failed. At most one replay is
-- pending at a time (the store refuses another). recorded_xid is the transaction that last recorded the dead
-- letter: a count's mark is the snapshot it read (pg_current_snapshot), and
-- a bulk action confirmed on that count acts only on the dead letters that
-- snapshot sees, exactly those counted. Needs PostgreSQL 13 (xid8).
ALTER TABLE idem_dead_letters
    ADD COLUMN IF NOT EXISTS first_reason text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS first_error  text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS recorded_xid xid8 NOT NULL DEFAULT '1'::xid8;
-- Constant defaults add the columns without rewriting the table or
-- updating its rows: a dead letter stored before this migration reads as
-- recorded by transaction 1, which every snapshot sees (it was recorded
-- before any mark), and its empty first_reason as "the first failure is
-- the current one" (the reads and the trigger take reason and error then).
-- The trigger sets both for every row recorded since.

CREATE TABLE IF NOT EXISTS idem_dead_letter_replays (
    seq            bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dead_letter_id text        NOT NULL REFERENCES idem_dead_letters (id) ON DELETE CASCADE,
    replayed_at    timestamptz NOT NULL,
    outcome        text        NOT NULL,
    settled_at     timestamptz,
    reason         text        NOT NULL DEFAULT '',
    error          text        NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS idem_dead_letter_replays_of ON idem_dead_letter_replays (dead_letter_id, seq);

CREATE OR REPLACE FUNCTION idem_dead_letter_recorded() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    replayed boolean;
BEGIN
    NEW.recorded_xid := pg_current_xact_id();
    IF TG_OP = 'INSERT' THEN
        NEW.first_reason := NEW.reason;
        NEW.first_error := NEW.error;
    ELSE
        IF OLD.first_reason = '' THEN -- stored before this migration
            NEW.first_reason := OLD.reason;
            NEW.first_error := OLD.error;
        ELSE
            NEW.first_reason := OLD.first_reason;
            NEW.first_error := OLD.first_error;
        END IF;
        -- The table is named with the trigger's schema: the session's
        -- search_path need not hold it.
        -- Only a replayed copy (header idem-replayed-at) settles the
        -- pending replay: a late copy of the original message failing
        -- again does not. An envelope the json operators cannot read (a
        -- \u0000 in a key) is searched as text.
        BEGIN
            replayed := json_extract_path(NEW.envelope, 'headers', 'idem-replayed-at') IS NOT NULL;
        EXCEPTION WHEN others THEN
            replayed := strpos(NEW.envelope::text, '"idem-replayed-at"') > 0;
        END;
        IF replayed THEN
            EXECUTE format('UPDATE %1$I.idem_dead_letter_replays SET outcome = ''failed'', settled_at = $1, reason = $2, error = $3
                WHERE seq = (SELECT max(seq) FROM %1$I.idem_dead_letter_replays WHERE dead_letter_id = $4) AND outcome = ''pending''',
                TG_TABLE_SCHEMA) USING NEW.last_failed_at, NEW.reason, NEW.error, NEW.id;
        END IF;
    END IF;
    RETURN NEW;
END;
$$;
DROP TRIGGER IF EXISTS idem_dead_letter_recorded ON idem_dead_letters;
CREATE TRIGGER idem_dead_letter_recorded
    BEFORE INSERT OR UPDATE OF last_failed_at ON idem_dead_letters
    FOR EACH ROW EXECUTE FUNCTION idem_dead_letter_recorded();

-- Version 17 (dead-letter state): a dead letter keeps the outcome of its
-- latest replay (latest_outcome: NULL when never replayed, else pending,
-- succeeded, failed, not_sent or duplicate) and its envelope's type
-- (message_type) in columns of their own, so that the console's state and
-- message-type filters are index conditions instead of a subquery on
-- idem_dead_letter_replays and a read of every envelope. The triggers keep
-- them: idem_dead_letter_recorded when a dead letter is recorded (again),
-- idem_dead_letter_replayed when a replay begins or is settled.
--
-- The columns are added without rewriting the table: the rows stored
-- before read latest_outcome 'unknown' (the default of the moment, then
-- dropped) and message_type NULL until the batched backfill below, run
-- outside this transaction, sets both. A trigger that writes such a row
-- sets its latest_outcome, and the backfill then keeps it (re-reading the
-- row it waited for, it takes the replays' outcome only while 'unknown').
ALTER TABLE idem_dead_letters
    ADD COLUMN IF NOT EXISTS latest_outcome text DEFAULT 'unknown',
    ADD COLUMN IF NOT EXISTS message_type text;
ALTER TABLE idem_dead_letters ALTER COLUMN latest_outcome DROP DEFAULT;

-- The envelope's type, '' when the database cannot read it as text (a
-- \u0000 in it: json's ->> refuses any \u0000 in the document, so the
-- type is read twice, with \u0000 spelled two other ways, and kept only
-- when both agree). No message-type filter selects ''.
CREATE OR REPLACE FUNCTION idem_dead_letter_recorded() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    replayed boolean;
    settled integer := 0;
    t1 text;
    t2 text;
BEGIN
    NEW.recorded_xid := pg_current_xact_id();
    IF strpos(NEW.envelope::text, '\u0000') = 0 THEN
        NEW.message_type := coalesce(NEW.envelope->>'type', '');
    ELSE
        t1 := replace(NEW.envelope::text, '\u0000', '\u0001')::json->>'type';
        t2 := replace(NEW.envelope::text, '\u0000', '\u0002')::json->>'type';
        NEW.message_type := CASE WHEN t1 = t2 THEN t1 ELSE '' END;
    END IF;
    IF TG_OP = 'INSERT' THEN
        NEW.first_reason := NEW.reason;
        NEW.first_error := NEW.error;
        NEW.latest_outcome := NULL;
    ELSE
        IF OLD.first_reason = '' THEN -- stored before migration 10
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
            -- idem_dead_letter_replayed, nested here, leaves this row to
            -- this trigger, which sets latest_outcome below.
            EXECUTE format('UPDATE %1$I.idem_dead_letter_replays SET outcome = ''failed'', settled_at = $1, reason = $2, error = $3
                WHERE seq = (SELECT max(seq) FROM %1$I.idem_dead_letter_replays WHERE dead_letter_id = $4) AND outcome = ''pending''',
                TG_TABLE_SCHEMA) USING NEW.last_failed_at, NEW.reason, NEW.error, NEW.id;
            GET DIAGNOSTICS settled = ROW_COUNT;
        END IF;
        IF settled > 0 THEN
            NEW.latest_outcome := 'failed';
        ELSIF OLD.latest_outcome = 'unknown' THEN -- not backfilled yet
            EXECUTE format('SELECT outcome FROM %1$I.idem_dead_letter_replays WHERE dead_letter_id = $1 ORDER BY seq DESC LIMIT 1',
                TG_TABLE_SCHEMA) INTO NEW.latest_outcome USING NEW.id;
        END IF;
    END IF;
    RETURN NEW;
END;
$$;

-- A replay begun or settled sets its dead letter's latest_outcome. The
-- writers lock the dead letter's row before its replays (BeginReplay,
-- SettleReplays), as recording it does, so that the two never wait on
-- each other in opposite orders. Nested in idem_dead_letter_recorded
-- (depth 2), it does nothing: that trigger sets the row it is writing.
CREATE OR REPLACE FUNCTION idem_dead_letter_replayed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_trigger_depth() > 1 THEN
        RETURN NULL;
    END IF;
    EXECUTE format('UPDATE %1$I.idem_dead_letters SET latest_outcome = $1
        WHERE id = $2 AND latest_outcome IS DISTINCT FROM $1
          AND $3 = (SELECT max(seq) FROM %1$I.idem_dead_letter_replays WHERE dead_letter_id = $2)',
        TG_TABLE_SCHEMA) USING NEW.outcome, NEW.dead_letter_id, NEW.seq;
    RETURN NULL;
END;
$$;
DROP TRIGGER IF EXISTS idem_dead_letter_replayed ON idem_dead_letter_replays;
CREATE TRIGGER idem_dead_letter_replayed
    AFTER INSERT OR UPDATE OF outcome ON idem_dead_letter_replays
    FOR EACH ROW EXECUTE FUNCTION idem_dead_letter_replayed();

-- idem:outside-transaction
-- What follows runs after the transaction above commits, one statement at
-- a time (see pgstore's Migrate): the backfill in batches of short
-- transactions, repeated until it changes no row, then each index built
-- without blocking writers. The version is recorded only when all is done.

-- The dead letters the backfill has still to fill, so that each batch
-- finds its 5,000 from this index instead of scanning past every row
-- filled before it (quadratic on a large table). Empty once the backfill
-- is done: every dead letter recorded since has its type.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idem_dead_letters_untyped
    ON idem_dead_letters (id COLLATE "C") WHERE message_type IS NULL;

-- idem:repeat
UPDATE idem_dead_letters d SET
    message_type = CASE WHEN strpos(d.envelope::text, '\u0000') = 0 THEN coalesce(d.envelope->>'type', '')
        WHEN (replace(d.envelope::text, '\u0000', '\u0001')::json->>'type') = (replace(d.envelope::text, '\u0000', '\u0002')::json->>'type')
        THEN replace(d.envelope::text, '\u0000', '\u0001')::json->>'type' ELSE '' END,
    latest_outcome = CASE WHEN d.latest_outcome = 'unknown'
        THEN (SELECT r.outcome FROM idem_dead_letter_replays r WHERE r.dead_letter_id = d.id ORDER BY r.seq DESC LIMIT 1)
        ELSE d.latest_outcome END
WHERE d.id IN (SELECT id FROM idem_dead_letters WHERE message_type IS NULL ORDER BY id COLLATE "C" LIMIT 5000) AND d.message_type IS NULL;

-- The console's default list: unresolved, not archived, in ID order. The
-- predicate is pgstore's unresolved state filter, word for word.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idem_dead_letters_open
    ON idem_dead_letters (id COLLATE "C")
    WHERE archived_at IS NULL AND coalesce(latest_outcome, '') NOT IN ('pending', 'succeeded', 'duplicate');

-- The groups (and the counts by reason) of the same dead letters, read
-- from the index alone, and each group's latest failure.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idem_dead_letters_open_groups
    ON idem_dead_letters (fingerprint COLLATE "C", reason COLLATE "C", last_failed_at DESC, id COLLATE "C") INCLUDE (first_failed_at)
    WHERE archived_at IS NULL AND coalesce(latest_outcome, '') NOT IN ('pending', 'succeeded', 'duplicate');

-- The same dead letters of one message type, in ID order, with what
-- their counts and groups read.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idem_dead_letters_open_type
    ON idem_dead_letters (message_type COLLATE "C", id COLLATE "C") INCLUDE (reason, fingerprint, first_failed_at, last_failed_at)
    WHERE archived_at IS NULL AND coalesce(latest_outcome, '') NOT IN ('pending', 'succeeded', 'duplicate');

-- Archived dead letters, in ID order.
CREATE INDEX CONCURRENTLY IF NOT EXISTS idem_dead_letters_archived
    ON idem_dead_letters (id COLLATE "C") INCLUDE (reason, fingerprint)
    WHERE archived_at IS NOT NULL;

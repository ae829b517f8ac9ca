-- Version 6: a dead letter keeps its history. A replay no longer deletes
-- it: idem_dead_letter_replays records each replay and its outcome, and
-- recording the dead letter again (the same message failed again) keeps
-- the first failure's reason and error and, when it comes from a replayed
-- copy, settles the pending replay as failed. At most one replay is
-- pending at a time (the store refuses another). recorded_seq numbers the recordings of dead letters (from
-- idem_dead_letter_marks, under SQLite's single writer, so in commit
-- order): a count's mark is the last number handed out, and a bulk action
-- confirmed on that count acts only on dead letters recorded before it.
ALTER TABLE idem_dead_letters ADD COLUMN first_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE idem_dead_letters ADD COLUMN first_error TEXT NOT NULL DEFAULT '';
ALTER TABLE idem_dead_letters ADD COLUMN recorded_seq INTEGER NOT NULL DEFAULT 0;
UPDATE idem_dead_letters SET first_reason = reason, first_error = error;

CREATE TABLE idem_dead_letter_marks (
    id   INTEGER PRIMARY KEY CHECK (id = 1),
    last INTEGER NOT NULL
) STRICT;
INSERT INTO idem_dead_letter_marks (id, last) VALUES (1, 0);

-- AUTOINCREMENT: seq orders one dead letter's replays and is never reused.
CREATE TABLE idem_dead_letter_replays (
    seq            INTEGER PRIMARY KEY AUTOINCREMENT,
    dead_letter_id TEXT    NOT NULL,
    replayed_at    INTEGER NOT NULL,
    outcome        TEXT    NOT NULL,
    settled_at     INTEGER,
    reason         TEXT    NOT NULL DEFAULT '',
    error          TEXT    NOT NULL DEFAULT ''
) STRICT;
CREATE INDEX idem_dead_letter_replays_of ON idem_dead_letter_replays (dead_letter_id, seq);

CREATE TRIGGER idem_dead_letter_recorded AFTER INSERT ON idem_dead_letters
BEGIN
    UPDATE idem_dead_letter_marks SET last = last + 1 WHERE id = 1;
    UPDATE idem_dead_letters SET first_reason = NEW.reason, first_error = NEW.error,
        recorded_seq = (SELECT last FROM idem_dead_letter_marks WHERE id = 1)
    WHERE id = NEW.id;
END;

CREATE TRIGGER idem_dead_letter_recorded_again AFTER UPDATE OF last_failed_at ON idem_dead_letters
BEGIN
    UPDATE idem_dead_letter_marks SET last = last + 1 WHERE id = 1;
    UPDATE idem_dead_letters SET recorded_seq = (SELECT last FROM idem_dead_letter_marks WHERE id = 1)
    WHERE id = NEW.id;
    -- Only a replayed copy (header idem-replayed-at) settles the pending
    -- replay: a late copy of the original message failing again does not.
    UPDATE idem_dead_letter_replays SET outcome = 'failed', settled_at = NEW.last_failed_at,
        reason = NEW.reason, error = NEW.error
    WHERE seq = (SELECT max(seq) FROM idem_dead_letter_replays WHERE dead_letter_id = NEW.id)
      AND outcome = 'pending'
      AND CASE WHEN json_valid(NEW.envelope)
          THEN json_extract(NEW.envelope, '$.headers."idem-replayed-at"') IS NOT NULL ELSE 0 END;
END;

CREATE TRIGGER idem_dead_letter_deleted AFTER DELETE ON idem_dead_letters
BEGIN
    DELETE FROM idem_dead_letter_replays WHERE dead_letter_id = OLD.id;
END;

-- Version 8 (dead-letter triage; pgstore 013): a dead letter keeps the fingerprint of
-- its latest failure (store.Fingerprint of its reason and error, computed
-- by the store when it records it), and the time it was archived (NULL:
-- not archived). A dead letter stored before this migration keeps the
-- fingerprint '' until it is recorded again: the console groups those as
-- "recorded before fingerprints". Recording a dead letter again restores
-- it (its message failed again: it needs an operator).
ALTER TABLE idem_dead_letters ADD COLUMN fingerprint TEXT NOT NULL DEFAULT '';
ALTER TABLE idem_dead_letters ADD COLUMN archived_at INTEGER;
CREATE INDEX idem_dead_letters_fingerprint ON idem_dead_letters (fingerprint, id);
-- Who began each replay (store.WithReplayBy): "console", "api", "cli: …",
-- '' when unknown (every replay before this migration).
ALTER TABLE idem_dead_letter_replays ADD COLUMN replayed_by TEXT NOT NULL DEFAULT '';
-- archived_seq is the number (from idem_dead_letter_marks, as recorded_seq)
-- of the dead letter's last archival or restoration, 0 for never: a count's
-- mark binds the archival state too, so that a bulk archive, restore or
-- purge confirmed on a count never acts on a dead letter archived or
-- restored since.
ALTER TABLE idem_dead_letters ADD COLUMN archived_seq INTEGER NOT NULL DEFAULT 0;
CREATE TRIGGER idem_dead_letter_archival AFTER UPDATE OF archived_at ON idem_dead_letters
WHEN NEW.archived_at IS NOT OLD.archived_at
BEGIN
    UPDATE idem_dead_letter_marks SET last = last + 1 WHERE id = 1;
    UPDATE idem_dead_letters SET archived_seq = (SELECT last FROM idem_dead_letter_marks WHERE id = 1)
    WHERE id = NEW.id;
END;

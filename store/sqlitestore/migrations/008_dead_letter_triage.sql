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

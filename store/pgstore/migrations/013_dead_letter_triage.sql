-- Version 13 (dead-letter triage): a dead letter keeps the fingerprint of
-- its latest failure (store.Fingerprint of its reason and error, computed
-- by the store when it records it), and the time it was archived (NULL:
-- not archived). Constant defaults add the columns without rewriting the
-- table: a dead letter stored before this migration keeps the fingerprint
-- '' until it is recorded again, and the console groups those as
-- "recorded before fingerprints". Recording a dead letter again restores
-- it (its message failed again: it needs an operator).
ALTER TABLE idem_dead_letters
    ADD COLUMN IF NOT EXISTS fingerprint text NOT NULL DEFAULT '',
    ADD COLUMN IF NOT EXISTS archived_at timestamptz;
-- The dead letters of one group, in the list's order.
CREATE INDEX IF NOT EXISTS idem_dead_letters_fingerprint ON idem_dead_letters (fingerprint COLLATE "C", id COLLATE "C");
-- Who began each replay (store.WithReplayBy): "console", "api", "cli: …",
-- '' when unknown (every replay before this migration).
ALTER TABLE idem_dead_letter_replays ADD COLUMN IF NOT EXISTS replayed_by text NOT NULL DEFAULT '';
-- archived_xid is the transaction that last archived or restored the dead
-- letter (NULL: never): a count's mark (a snapshot) binds the archival
-- state too, so that a bulk archive, restore or purge confirmed on a count
-- never acts on a dead letter archived or restored since.
ALTER TABLE idem_dead_letters ADD COLUMN IF NOT EXISTS archived_xid xid8;

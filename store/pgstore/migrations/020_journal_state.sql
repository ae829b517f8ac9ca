-- Version 20 (history): a journal entry records the saga's state after its
-- step (bytea, bounded by Config.JournalPayloadLimit) instead of a JSON
-- patch: a reader computes the change between two entries' states when
-- somebody reads the history, so that no step pays for a diff nobody
-- reads. NULL: not recorded (capture off, or an entry written before this
-- version, whose diff column still holds its patch). Adding a nullable
-- column rewrites nothing.
ALTER TABLE idem_journal ADD COLUMN IF NOT EXISTS state bytea;

-- Version 15 (history; pgstore 020): a journal entry records the saga's
-- state after its step (a BLOB, bounded by Config.JournalPayloadLimit)
-- instead of a JSON patch: a reader computes the change between two
-- entries' states only when somebody reads the history. NULL: not
-- recorded (capture off, or an entry written before this version, whose
-- diff column still holds its patch).
ALTER TABLE idem_journal ADD COLUMN state BLOB;

-- Version 10 (history; pgstore 015): a journal entry may record its message's payload,
-- the state change as a JSON patch (BLOBs, kept byte for byte) and a JSON
-- document with the rest of its detail (headers, causation and correlation
-- IDs, emitted messages, duration, actor). NULL: nothing recorded.
ALTER TABLE idem_journal ADD COLUMN payload BLOB;
ALTER TABLE idem_journal ADD COLUMN diff BLOB;
ALTER TABLE idem_journal ADD COLUMN detail TEXT;

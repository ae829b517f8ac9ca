-- Version 15 (history): a journal entry may record its message's payload,
-- the state change as a JSON patch (both bytea, so that U+0000 and invalid
-- UTF-8 survive) and a JSON document with the rest of its detail (headers,
-- causation and correlation IDs, emitted messages, duration, actor; text,
-- not jsonb, which refuses U+0000). NULL: nothing recorded, which costs an
-- entry written with capture off nothing but the null bitmap.
ALTER TABLE idem_journal
    ADD COLUMN payload bytea,
    ADD COLUMN diff    bytea,
    ADD COLUMN detail  text;

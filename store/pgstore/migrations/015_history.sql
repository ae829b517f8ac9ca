-- Version 15 (history): a journal entry may record its message's payload,
-- the state change as a JSON patch (both bytea, so that U+0000 and invalid
-- UTF-8 survive) and a JSON document with the rest of its detail (headers,
-- causation and correlation IDs, emitted messages, duration, actor; text,
-- not jsonb, which refuses U+0000). NULL: nothing recorded. With capture
-- off, payload and diff are NULL; the document still holds the IDs, the
-- emitted messages and the duration.
ALTER TABLE idem_journal
    ADD COLUMN payload bytea,
    ADD COLUMN diff    bytea,
    ADD COLUMN detail  text;

-- Version 12 changes nothing in SQLite. PostgreSQL's migration 017 keeps
-- each dead letter's latest replay outcome and message type in columns
-- of their own, for the console at 100,000 dead letters; SQLite serves
-- a single process's console, and reads the latest replay through the
-- index on (dead_letter_id, seq) and the message type from the envelope
-- (json_extract). The file keeps the two stores' versions paired.
SELECT 1;

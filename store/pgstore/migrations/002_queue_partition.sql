-- Version 2: the queue keeps each message's partition hash, so that a
-- partitioned claim filters on an integer instead of parsing every scanned
-- row's envelope.
ALTER TABLE idem_queue ADD COLUMN part integer NOT NULL DEFAULT 0;
UPDATE idem_queue SET part = abs(hashtext(coalesce(nullif(envelope->>'correlation_id', ''), id)));

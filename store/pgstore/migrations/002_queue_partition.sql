-- Version 2: the queue keeps each message's partition hash, so that a
-- partitioned claim filters on an integer instead of parsing every scanned
-- row's envelope. Stop consumers of the previous version before migrating:
-- their inserts would all land in partition 0 (still exactly-once, but not
-- spread over consumers), and the UPDATE rewrites the queue under a lock.
ALTER TABLE idem_queue ADD COLUMN part integer NOT NULL DEFAULT 0;
UPDATE idem_queue SET part = hashtext(coalesce(nullif(envelope->>'correlation_id', ''), id)) & 2147483647;

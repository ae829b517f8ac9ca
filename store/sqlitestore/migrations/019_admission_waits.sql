-- The refusal an admitting receive last recorded on a queue row: the
-- counter (limit name and key) that refused it and the row's attempt
-- then, and refused_part the hash of its partition key
-- (transport.PartitionHash), by which a saga's waits are found. It is
-- current only while the row is visible and its attempt still equals
-- refused_attempt (every lease increments attempt), so nothing else has
-- to clear it. Written only when it changes, never on the
-- happy path. The partial index holds only the rows with a refusal: the
-- count of messages waiting per counter (LimitUses) scans it, and a
-- saga's waits (AdmissionWaitsOf) find its rows by refused_part.
ALTER TABLE idem_queue ADD COLUMN refused_name TEXT;
ALTER TABLE idem_queue ADD COLUMN refused_key TEXT;
ALTER TABLE idem_queue ADD COLUMN refused_attempt INTEGER;
ALTER TABLE idem_queue ADD COLUMN refused_part INTEGER;
CREATE INDEX idem_queue_refused ON idem_queue (refused_part) WHERE refused_name IS NOT NULL;

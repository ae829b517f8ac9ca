-- The refusal an admitting receive last recorded on a queue row: the
-- counter (limit name and key) that refused it and the row's attempt
-- then. It is current only while the row is visible and its attempt still
-- equals refused_attempt (every lease increments attempt), so nothing
-- else has to clear it. Written only when it changes, never on the
-- happy path. Nullable columns without a default: adding them rewrites
-- nothing. The partial index holds only the rows with a refusal: the
-- count of messages waiting per counter (LimitUses) scans it, and a
-- saga's waits (AdmissionWaitsOf) find its rows by their partition. Built
-- after the transaction, concurrently, so that the queue keeps being
-- written while it is built.
ALTER TABLE idem_queue
    ADD COLUMN IF NOT EXISTS refused_name    text,
    ADD COLUMN IF NOT EXISTS refused_key     text,
    ADD COLUMN IF NOT EXISTS refused_attempt integer;

-- idem:outside-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS idem_queue_refused ON idem_queue (part) WHERE refused_name IS NOT NULL;

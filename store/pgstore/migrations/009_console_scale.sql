-- The console at scale (1,000,000 instances, 100,000 dead letters): every
-- list pages by keyset in byte order (COLLATE "C", as the other stores
-- order), and the primary keys, in the database's collation, cannot serve
-- that order unless the database's collation is "C" itself.
CREATE INDEX IF NOT EXISTS idem_instances_keyset ON idem_instances (saga_type COLLATE "C", key COLLATE "C");
-- Instances of one type in one state, in key order; it replaces the index
-- of version 5, in the database's collation, which served counting only.
CREATE INDEX IF NOT EXISTS idem_instances_type_state ON idem_instances (saga_type COLLATE "C", state COLLATE "C", key COLLATE "C");
DROP INDEX IF EXISTS idem_instances_state;
CREATE INDEX IF NOT EXISTS idem_dead_letters_keyset ON idem_dead_letters (id COLLATE "C");
-- Dead letters filtered and counted by reason, and those of one saga.
CREATE INDEX IF NOT EXISTS idem_dead_letters_reason ON idem_dead_letters (reason COLLATE "C", id COLLATE "C");
CREATE INDEX IF NOT EXISTS idem_dead_letters_saga ON idem_dead_letters (saga_type COLLATE "C", key COLLATE "C", id COLLATE "C");
-- Instance counts by (type, state, status) estimated from ANALYZE's
-- sample, so that the overview does not count 1,000,000 rows on every
-- refresh (pgstore's EstimateInstanceCounts). Expression statistics need
-- PostgreSQL 14; older servers count a block sample instead.
DO $$
BEGIN
    IF current_setting('server_version_num')::int >= 140000 THEN
        EXECUTE 'CREATE STATISTICS IF NOT EXISTS idem_instances_counts (mcv) ON saga_type, state, (finished_at IS NULL) FROM idem_instances';
    END IF;
END
$$;

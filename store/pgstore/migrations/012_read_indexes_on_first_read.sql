-- Version 12: the indexes of idem_instances that only operators' reads use
-- (the console, the admin API, idem sagas ls: the stuck view by update
-- time, and keyset paging and filtering in byte order, versions 5 and 9)
-- cost nothing to a deployment that never reads its instances that way
-- (issue 24). Every instance the engine writes maintained them, and the
-- stuck view's index on updated_at made every update non-HOT. The store
-- builds them, with CREATE INDEX CONCURRENTLY, in the background of the
-- first such read (pgstore's readindexes.go); the reads return the same
-- rows with or without them.
DROP INDEX IF EXISTS idem_instances_stuck;
DROP INDEX IF EXISTS idem_instances_keyset;
DROP INDEX IF EXISTS idem_instances_type_state;

-- Version 13 changes nothing on SQLite. PostgreSQL's migration 018 adds an
-- index on (saga_type, updated_at, key) for the console's "updated
-- between" filter at 1,000,000 instances; SQLite serves the console at the
-- scale it is meant for (12,000 instances measured, docs/benchmarks.md)
-- by scanning one type's instances, and its single writer would pay one
-- more b-tree insert on every saga write. The number keeps the two
-- stores' migrations paired.
SELECT 1;

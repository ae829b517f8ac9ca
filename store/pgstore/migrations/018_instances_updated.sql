-- The console's "updated between" filter (issue 25): the instances of one
-- saga type updated in a time range, read as a range of this index instead
-- of every instance of the type (the stuck view's index, of version 5,
-- holds active instances only). Every saga update writes one more index
-- entry for it; updates were not HOT before (updated_at is in the stuck
-- index), so none loses HOT. docs/benchmarks.md has the cost. Built after
-- the (empty) transaction, concurrently on a large table, so that sagas
-- keep being written while it is built.

-- idem:outside-transaction
CREATE INDEX CONCURRENTLY IF NOT EXISTS idem_instances_type_updated ON idem_instances (saga_type COLLATE "C", updated_at, key COLLATE "C");

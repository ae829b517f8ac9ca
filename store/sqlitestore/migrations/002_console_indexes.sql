-- The console's "stuck" view: active instances, least recently updated first.
CREATE INDEX idem_instances_stuck ON idem_instances (updated_at, saga_type, key) WHERE finished_at IS NULL;
-- Counting and filtering instances of one type by state.
CREATE INDEX idem_instances_state ON idem_instances (saga_type, state);

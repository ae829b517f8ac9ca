-- Version 6: business attributes. Each instance keeps its attributes as a
-- jsonb object (name to value) in idem_instances.attributes, written with
-- the instance; triggers mirror them into idem_saga_attributes, in the same
-- transaction, where an index finds instances by value. An update rewrites
-- the side rows only when the object changed; deleting an instance (the
-- sweeper, an operator's purge) deletes its rows.
ALTER TABLE idem_instances ADD COLUMN attributes jsonb;

CREATE TABLE idem_saga_attributes (
    saga_type text NOT NULL,
    key       text NOT NULL,
    name      text NOT NULL,
    value     text NOT NULL,
    PRIMARY KEY (saga_type, key, name)
);
-- Search by value, with or without a saga type, in key order.
CREATE INDEX idem_saga_attributes_value ON idem_saga_attributes (name, value, saga_type, key);

-- Statement triggers with transition tables: one INSERT (and one DELETE)
-- per statement, however many instances the engine's batch writes, instead
-- of one per row. (PostgreSQL allows no column list with transition tables,
-- so every UPDATE fires the update trigger; it touches only the rows whose
-- attributes changed.)
CREATE FUNCTION idem_attributes_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO idem_saga_attributes (saga_type, key, name, value)
    SELECT n.saga_type, n.key, e.key, e.value
    FROM new_rows n, jsonb_each_text(n.attributes) AS e
    WHERE n.attributes IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE FUNCTION idem_attributes_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM idem_saga_attributes a
    USING old_rows o JOIN new_rows n ON n.saga_type = o.saga_type AND n.key = o.key
    WHERE o.attributes IS DISTINCT FROM n.attributes AND o.attributes IS NOT NULL
      AND a.saga_type = o.saga_type AND a.key = o.key;
    INSERT INTO idem_saga_attributes (saga_type, key, name, value)
    SELECT n.saga_type, n.key, e.key, e.value
    FROM old_rows o JOIN new_rows n ON n.saga_type = o.saga_type AND n.key = o.key,
         jsonb_each_text(n.attributes) AS e
    WHERE o.attributes IS DISTINCT FROM n.attributes AND n.attributes IS NOT NULL;
    RETURN NULL;
END
$$;

CREATE FUNCTION idem_attributes_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM idem_saga_attributes a
    USING old_rows o
    WHERE o.attributes IS NOT NULL AND a.saga_type = o.saga_type AND a.key = o.key;
    RETURN NULL;
END
$$;

CREATE TRIGGER idem_attributes_insert AFTER INSERT ON idem_instances
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION idem_attributes_inserted();
CREATE TRIGGER idem_attributes_update AFTER UPDATE ON idem_instances
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION idem_attributes_updated();
CREATE TRIGGER idem_attributes_delete AFTER DELETE ON idem_instances
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION idem_attributes_deleted();

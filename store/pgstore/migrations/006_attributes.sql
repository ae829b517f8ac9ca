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

CREATE FUNCTION idem_sync_attributes() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' THEN
        DELETE FROM idem_saga_attributes WHERE saga_type = OLD.saga_type AND key = OLD.key;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.attributes IS NOT NULL THEN
        INSERT INTO idem_saga_attributes (saga_type, key, name, value)
        SELECT NEW.saga_type, NEW.key, e.key, e.value FROM jsonb_each_text(NEW.attributes) AS e;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER idem_attributes_insert AFTER INSERT ON idem_instances
    FOR EACH ROW WHEN (NEW.attributes IS NOT NULL) EXECUTE FUNCTION idem_sync_attributes();
CREATE TRIGGER idem_attributes_update AFTER UPDATE OF attributes ON idem_instances
    FOR EACH ROW WHEN (OLD.attributes IS DISTINCT FROM NEW.attributes) EXECUTE FUNCTION idem_sync_attributes();
CREATE TRIGGER idem_attributes_delete AFTER DELETE ON idem_instances
    FOR EACH ROW WHEN (OLD.attributes IS NOT NULL) EXECUTE FUNCTION idem_sync_attributes();

-- Version 3: business attributes. Each instance keeps its attributes as a
-- JSON object (name to value) in idem_instances.attributes, written with
-- the instance; triggers mirror them into idem_saga_attributes, in the same
-- transaction, where an index finds instances by value. An update rewrites
-- the side rows only when the object changed; deleting an instance (the
-- sweeper, an operator's purge) deletes its rows.
ALTER TABLE idem_instances ADD COLUMN attributes TEXT;

CREATE TABLE idem_saga_attributes (
    saga_type TEXT NOT NULL,
    key       TEXT NOT NULL,
    name      TEXT NOT NULL,
    value     TEXT NOT NULL,
    PRIMARY KEY (saga_type, key, name)
) STRICT, WITHOUT ROWID;
-- Search by value, with or without a saga type, in key order.
CREATE INDEX idem_saga_attributes_value ON idem_saga_attributes (name, value, saga_type, key);

CREATE TRIGGER idem_attributes_insert AFTER INSERT ON idem_instances
WHEN NEW.attributes IS NOT NULL
BEGIN
    INSERT INTO idem_saga_attributes (saga_type, key, name, value)
    SELECT NEW.saga_type, NEW.key, j.key, j.value FROM json_each(NEW.attributes) AS j;
END;

CREATE TRIGGER idem_attributes_update AFTER UPDATE OF attributes ON idem_instances
WHEN NEW.attributes IS NOT OLD.attributes
BEGIN
    DELETE FROM idem_saga_attributes WHERE saga_type = OLD.saga_type AND key = OLD.key;
    INSERT INTO idem_saga_attributes (saga_type, key, name, value)
    SELECT NEW.saga_type, NEW.key, j.key, j.value FROM json_each(NEW.attributes) AS j;
END;

CREATE TRIGGER idem_attributes_delete AFTER DELETE ON idem_instances
WHEN OLD.attributes IS NOT NULL
BEGIN
    DELETE FROM idem_saga_attributes WHERE saga_type = OLD.saga_type AND key = OLD.key;
END;

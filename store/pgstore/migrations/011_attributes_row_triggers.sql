-- Version 11: the attribute triggers cost nothing to instances without
-- attributes (issue 24). The statement triggers of version 6 ran on every
-- INSERT, UPDATE and DELETE of idem_instances, and their transition tables
-- made PostgreSQL copy every written row, whether or not a saga type
-- declared attributes. Row triggers with a WHEN clause instead: the server
-- checks the condition for each row as it writes it and runs the function
-- only for the rows whose attributes it must mirror (an instance inserted
-- or deleted with attributes, an update that changed them), so a user who
-- declares none never runs it, and an update that keeps the attributes as
-- they were does not either.
DROP TRIGGER IF EXISTS idem_attributes_insert ON idem_instances;
DROP TRIGGER IF EXISTS idem_attributes_update ON idem_instances;
DROP TRIGGER IF EXISTS idem_attributes_delete ON idem_instances;
DROP FUNCTION IF EXISTS idem_attributes_inserted();
DROP FUNCTION IF EXISTS idem_attributes_updated();
DROP FUNCTION IF EXISTS idem_attributes_deleted();

CREATE OR REPLACE FUNCTION idem_attribute_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.attributes IS NOT NULL THEN
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
    FOR EACH ROW WHEN (NEW.attributes IS NOT NULL)
    EXECUTE FUNCTION idem_attribute_rows();
CREATE TRIGGER idem_attributes_update AFTER UPDATE OF attributes ON idem_instances
    FOR EACH ROW WHEN (OLD.attributes IS DISTINCT FROM NEW.attributes)
    EXECUTE FUNCTION idem_attribute_rows();
CREATE TRIGGER idem_attributes_delete AFTER DELETE ON idem_instances
    FOR EACH ROW WHEN (OLD.attributes IS NOT NULL)
    EXECUTE FUNCTION idem_attribute_rows();

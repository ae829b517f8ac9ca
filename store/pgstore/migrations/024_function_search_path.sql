-- The trigger functions name Idem's tables unqualified, and the server
-- resolves those names with the search path of the session that fires
-- them. Through a connection pooler in transaction mode (PgBouncer) the
-- store's sessions cannot set search_path, so each function carries the
-- schema it was created in (the search path of this migration). A later
-- CREATE OR REPLACE FUNCTION must say SET search_path FROM CURRENT again.
DO $$
DECLARE
    f regprocedure;
BEGIN
    FOR f IN
        SELECT p.oid::regprocedure FROM pg_proc p
        WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
          AND p.prorettype = 'trigger'::regtype
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path FROM CURRENT', f);
    END LOOP;
END $$;

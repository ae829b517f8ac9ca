-- Version 3: TRUNCATE cannot empty the journal either. The row triggers of
-- version 1 refuse UPDATE and DELETE, but TRUNCATE fires no row trigger;
-- this statement trigger refuses it with the same guard (TG_OP 'TRUNCATE'
-- is never the sweeper's DELETE).
CREATE TRIGGER idem_journal_no_truncate
    BEFORE TRUNCATE ON idem_journal
    FOR EACH STATEMENT EXECUTE FUNCTION idem_journal_guard();

-- Version 4: a dead letter keeps the envelope exactly as it arrived, and
-- the envelope of hostile input may hold U+0000, which jsonb refuses
-- (SQLSTATE 22P05) but json keeps (it stores the text as given). Nothing
-- queries inside a dead letter's envelope, so nothing is lost by leaving
-- jsonb.
ALTER TABLE idem_dead_letters ALTER COLUMN envelope TYPE json USING envelope::json;

-- Version 19: retry now (issue 25). A retry keeps the failed message's
-- envelope (metadata as json, which keeps U+0000 as dead letters' does,
-- and the body) so that an operator can publish it again at once, and
-- when an operator last did (retry_now_at). Written only on failure, so
-- the happy path pays nothing. Rows recorded before this version have no
-- envelope (NULL) and cannot be retried now.
ALTER TABLE idem_retries ADD COLUMN IF NOT EXISTS envelope json;
ALTER TABLE idem_retries ADD COLUMN IF NOT EXISTS body bytea;
ALTER TABLE idem_retries ADD COLUMN IF NOT EXISTS retry_now_at timestamptz;

-- Retry now (issue 25, pgstore's 019): a retry keeps the failed message's
-- envelope (metadata JSON and body) so that an operator can publish it
-- again at once, and when an operator last did (retry_now_at, in
-- microseconds). Rows recorded before have none (NULL) and cannot be
-- retried now.
ALTER TABLE idem_retries ADD COLUMN envelope TEXT;
ALTER TABLE idem_retries ADD COLUMN body BLOB;
ALTER TABLE idem_retries ADD COLUMN retry_now_at INTEGER;

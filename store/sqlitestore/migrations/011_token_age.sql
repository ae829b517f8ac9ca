-- Unclaimed dedup tokens by age: the metrics count the old ones and the
-- sweeper deletes them after Config.TokenRetention (store.TokenSweeper),
-- each reading only the tokens it selects.
CREATE INDEX IF NOT EXISTS idem_tokens_minted_at ON idem_tokens (minted_at);

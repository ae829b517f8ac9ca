-- The token inbox: one row per dedup token minted and not yet claimed.
-- No sweep deletes tokens by age: a claimed token is deleted by the unit of
-- work that applied its message.
CREATE TABLE IF NOT EXISTS idem_tokens (
    id        text PRIMARY KEY,
    minted_at timestamptz NOT NULL
);

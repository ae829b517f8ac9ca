-- The token inbox: one row per dedup token minted and not yet claimed.
-- No sweep deletes tokens by age: a claimed token is deleted by the unit of
-- work that applied its message.
CREATE TABLE idem_tokens (
    id        TEXT PRIMARY KEY,
    minted_at INTEGER NOT NULL
) WITHOUT ROWID;

-- Version 16 (flow control, see store.Limiter; pgstore 021): the limits'
-- runtime overrides, the code's declarations (the last replica to
-- declare a name wins), one counter row per (limit, key) keeping its token
-- bucket (tokens NULL: no bucket yet, it starts full), and the holds, one
-- per admitted holder and capped counter, live until released or until
-- expires_at (microseconds since the epoch, the process's clock, as the
-- queue's leases are). Names and keys are TEXT, compared byte for byte.
CREATE TABLE idem_limits (
  name TEXT PRIMARY KEY,
  concurrency INTEGER NOT NULL DEFAULT 0,
  rate REAL NOT NULL DEFAULT 0,
  burst INTEGER NOT NULL DEFAULT 0,
  updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE idem_limits_declared (
  name TEXT PRIMARY KEY,
  concurrency INTEGER NOT NULL DEFAULT 0,
  rate REAL NOT NULL DEFAULT 0,
  burst INTEGER NOT NULL DEFAULT 0,
  updated_at INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
CREATE TABLE idem_limit_counters (
  name TEXT NOT NULL,
  key TEXT NOT NULL,
  tokens REAL,
  refilled_at INTEGER,
  PRIMARY KEY (name, key)
) STRICT, WITHOUT ROWID;
CREATE TABLE idem_limit_holds (
  name TEXT NOT NULL,
  key TEXT NOT NULL,
  holder TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  PRIMARY KEY (name, key, holder)
) STRICT, WITHOUT ROWID;
CREATE INDEX idem_limit_holds_holder ON idem_limit_holds (holder);

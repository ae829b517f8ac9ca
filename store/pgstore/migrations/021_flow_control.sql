-- Version 21 (flow control, see store.Limiter): the limits' runtime
-- overrides, the code's declarations (the last replica to declare a name
-- wins), one counter row per (limit, key) that Admit locks in (name,
-- key) order and that keeps the counter's token bucket (tokens NULL: no
-- bucket yet, it starts full), and the holds, one per admitted holder and
-- capped counter, live until released or until expires_at (the
-- database's clock). New, empty tables: nothing is rewritten.
CREATE TABLE IF NOT EXISTS idem_limits (
  name text PRIMARY KEY,
  concurrency integer NOT NULL DEFAULT 0,
  rate double precision NOT NULL DEFAULT 0,
  burst integer NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS idem_limits_declared (
  name text PRIMARY KEY,
  concurrency integer NOT NULL DEFAULT 0,
  rate double precision NOT NULL DEFAULT 0,
  burst integer NOT NULL DEFAULT 0,
  updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS idem_limit_counters (
  name text NOT NULL,
  key text NOT NULL,
  tokens double precision,
  refilled_at timestamptz,
  PRIMARY KEY (name, key)
);
CREATE TABLE IF NOT EXISTS idem_limit_holds (
  name text NOT NULL,
  key text NOT NULL,
  holder text NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (name, key, holder)
);
CREATE INDEX IF NOT EXISTS idem_limit_holds_holder ON idem_limit_holds (holder);

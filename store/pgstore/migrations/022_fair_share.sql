-- Version 22 (fair share, see store.ReceiveParams.Fair): the fair queue's
-- clock, start-time fair queueing's virtual time V (the start tag of the
-- message admitted last), and each share's finish tag. A share whose
-- finish is at most V starts at V, as an absent one does, so such rows are
-- dropped. A fair receive locks the clock's row first: fair receives take
-- turns, and each sees the tags the last one wrote.
CREATE TABLE IF NOT EXISTS idem_fair_clock (
  id integer PRIMARY KEY CHECK (id = 1),
  v double precision NOT NULL
);
INSERT INTO idem_fair_clock (id, v) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
CREATE TABLE IF NOT EXISTS idem_fair_shares (
  share text PRIMARY KEY,
  finish double precision NOT NULL
);

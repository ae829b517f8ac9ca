-- Version 17 (fair share, see store.ReceiveParams.Fair; pgstore 022): the
-- fair queue's clock, start-time fair queueing's virtual time V (the start
-- tag of the message admitted last), and each share's finish tag. A share
-- whose finish is at most V starts at V, as an absent one does, so such
-- rows are dropped.
CREATE TABLE IF NOT EXISTS idem_fair_clock (
  id INTEGER PRIMARY KEY CHECK (id = 1),
  v REAL NOT NULL
) STRICT;
INSERT INTO idem_fair_clock (id, v) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
CREATE TABLE IF NOT EXISTS idem_fair_shares (
  share TEXT PRIMARY KEY,
  finish REAL NOT NULL
) STRICT, WITHOUT ROWID;

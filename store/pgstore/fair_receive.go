package pgstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/admit"
)

// A fair receive (store.ReceiveParams.Fair) decides on the window that
// admit.FairWindow chooses from each share's heads. It reads only the
// heads: the distinct shares by a loose scan of idem_queue_fair, each
// share's first messages by priority through the same index, and, for
// each head, how many visible messages of its partition come before it
// (idem_queue_part). Both indexes exist only where fair receives run: the
// first one a Store makes builds them (ensureFairIndexes).

// The expressions a fair receive reads of a queue row, as
// transport.FairnessOf reads the headers; idem_queue_fair indexes the
// first two, and a query must spell them alike to use it.
const (
	shareExpr  = `CASE WHEN octet_length(envelope->'headers'->>'idem-fairness-key') > 200 THEN 'md5:' || md5(envelope->'headers'->>'idem-fairness-key') ELSE coalesce(envelope->'headers'->>'idem-fairness-key', '') END`
	prioExpr   = `CASE WHEN envelope->'headers'->>'idem-priority' ~ '^-?[0-9]{1,3}$' THEN least(greatest((envelope->'headers'->>'idem-priority')::int, -100), 100) ELSE 0 END`
	weightExpr = `CASE WHEN envelope->'headers'->>'idem-fairness-weight' ~ '^[0-9]{1,4}$' THEN least(greatest((envelope->'headers'->>'idem-fairness-weight')::int, 1), 1000) ELSE 1 END`
)

// fairIndexesSQL builds the indexes of fair receives, in the form of a
// migration's outside part (built concurrently on a large queue, and
// again when an interrupted build left one invalid).
var fairIndexesSQL = "\n" + outsideMarker + "\n" +
	"CREATE INDEX CONCURRENTLY IF NOT EXISTS idem_queue_fair ON idem_queue ((" + shareExpr + "), (" + prioExpr + ") DESC, visible_at, seq);\n" +
	"CREATE INDEX CONCURRENTLY IF NOT EXISTS idem_queue_part ON idem_queue (part, visible_at, seq);\n"

// fairHeadsSQL reads each share's heads ($1 per share, of partition $2
// of $3), in queue order, with the share's finish tag and the visible
// messages of the head's partition before it (counted up to $1 + 1).
var fairHeadsSQL = strings.NewReplacer("SHARE", shareExpr, "PRIO", prioExpr, "WEIGHT", weightExpr).Replace(`
WITH RECURSIVE shares AS (
  (SELECT SHARE AS s FROM idem_queue ORDER BY SHARE LIMIT 1)
  UNION ALL
  SELECT (SELECT SHARE FROM idem_queue WHERE SHARE > shares.s ORDER BY SHARE LIMIT 1) FROM shares WHERE shares.s IS NOT NULL
), heads AS (
  SELECT h.* FROM shares CROSS JOIN LATERAL (
    SELECT seq, visible_at, part, SHARE AS share, PRIO AS prio, WEIGHT AS weight FROM idem_queue
    WHERE SHARE = shares.s AND visible_at <= now() AND ($3 < 2 OR mod(part, $3) = $2)
    ORDER BY PRIO DESC, visible_at, seq LIMIT $1) h
  WHERE shares.s IS NOT NULL
)
SELECT heads.seq, heads.part, heads.share, heads.prio, heads.weight, coalesce(f.finish, 0),
  (SELECT count(*) FROM (SELECT 1 FROM idem_queue e WHERE e.part = heads.part AND e.visible_at <= now()
     AND (e.visible_at, e.seq) < (heads.visible_at, heads.seq) LIMIT $1 + 1) x)
FROM heads LEFT JOIN idem_fair_shares f ON f.share = heads.share
ORDER BY heads.visible_at, heads.seq`)

// lockWindowSQL locks the rows $1 of a fair window that are still
// visible, skipping those another consumer holds.
const lockWindowSQL = `
SELECT seq, envelope, body, attempt, visible_at, extract(epoch FROM now() - visible_at)::float8,
  refused_name, refused_key, refused_attempt FROM idem_queue
WHERE seq = ANY($1) AND visible_at <= now()
FOR UPDATE SKIP LOCKED`

// lockFairClockSQL locks the fair clock: fair receives take turns, each
// ranking under the tags the last one wrote.
const lockFairClockSQL = `SELECT v FROM idem_fair_clock WHERE id = 1 FOR UPDATE`

// saveFairClockSQL stores the clock $1 and the finish tags $3 of the
// shares $2 past it, and drops the other shares at or before it.
const saveFairClockSQL = `
WITH c AS (UPDATE idem_fair_clock SET v = $1 WHERE id = 1),
d AS (DELETE FROM idem_fair_shares WHERE finish <= $1 AND NOT share = ANY($2::text[]))
INSERT INTO idem_fair_shares (share, finish)
SELECT * FROM unnest($2::text[], $3::float8[]) AS u(share, finish) WHERE u.finish > $1
ON CONFLICT (share) DO UPDATE SET finish = excluded.finish`

// fairHead is a share's head as fairHeadsSQL reads it.
type fairHead struct {
	seq  int64
	part int32
	row  admit.FairRow
}

// ensureFairIndexes builds the indexes of fair receives once per Store,
// under the migration lock; a failure is logged, and fair receives go on
// without them (slower).
func (s *Store) ensureFairIndexes(ctx context.Context) {
	s.fairIndexes.Do(func() {
		if err := s.buildFairIndexes(ctx); err != nil {
			s.log.Warn("pgstore: building the indexes of fair receives failed; fair receives read the whole backlog until a restart builds them", "error", redact(err))
		}
	})
}

func (s *Store) buildFairIndexes(ctx context.Context) error {
	m, err := parseMigration("fair indexes", fairIndexesSQL)
	if err != nil || len(m.outside) != 2 {
		return fmt.Errorf("parse the fair indexes: %d statements, %w", len(m.outside), err)
	}
	pooled, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// As Migrate's: the session never goes back to the pool.
	conn := pooled.Hijack()
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := s.migrateLock(ctx, conn); err != nil {
		return err
	}
	for _, st := range m.outside {
		if err := s.runOutside(ctx, conn, st); err != nil {
			return fmt.Errorf("%s: %w", st.index, err)
		}
	}
	return nil
}

// queueClock queues the lock and read of the fair clock into t.clock.
// Every fair receive waits for the lock, so the transaction ends itself
// when its process stalls between statements for a lease (a frozen VM,
// a partition), rather than hold up every fair receive until TCP gives
// up on it.
func (t *admitTxn) queueClock(b *pgx.Batch) {
	t.clock = admit.FairClock{Finish: map[string]float64{}}
	b.Queue(`SELECT set_config('idle_in_transaction_session_timeout', $1, true)`, strconv.FormatInt(max(t.s.cfg.Lease.Milliseconds(), 1000), 10))
	b.Queue(lockFairClockSQL).QueryRow(func(r pgx.Row) error { return r.Scan(&t.clock.V) })
}

// queueHeads queues the read of the shares' heads into t.heads.
func (t *admitTxn) queueHeads(b *pgx.Batch) {
	t.heads = t.heads[:0]
	b.Queue(fairHeadsSQL, admitWindow*t.n, t.p.Part, t.p.Parts).Query(func(r pgx.Rows) error {
		for r.Next() {
			var h fairHead
			var finish float64
			if err := r.Scan(&h.seq, &h.part, &h.row.Key, &h.row.Priority, &h.row.Weight, &finish, &h.row.Earlier); err != nil {
				return err
			}
			h.row.PartKey = strconv.Itoa(int(h.part))
			t.clock.Finish[h.row.Key] = finish
			t.heads = append(t.heads, h)
		}
		return r.Err()
	})
}

// lockWindow ranks the heads (admit.FairWindow), locks the rows of the
// window that are still visible into t.page, in the window's order, and
// drops a row whose partition lost an earlier row of the window to
// another consumer: it must not overtake it.
func (t *admitTxn) lockWindow(ctx context.Context) error {
	rows := make([]admit.FairRow, len(t.heads))
	for i, h := range t.heads {
		rows[i] = h.row
	}
	win := admit.FairWindow(rows, &t.clock, admitWindow*t.n)
	seqs := make([]int64, len(win))
	for i, w := range win {
		seqs[i] = t.heads[w.Index].seq
	}
	t.page = t.page[:0]
	b := &pgx.Batch{}
	b.Queue(lockWindowSQL, seqs).Query(t.scanPage)
	if err := t.conn.SendBatch(ctx, b).Close(); err != nil {
		return err
	}
	got := map[int64]candidate{}
	for _, c := range t.page {
		got[c.seq] = c
	}
	t.page = t.page[:0]
	lost := map[int32]bool{}
	for _, w := range win {
		h := t.heads[w.Index]
		c, ok := got[h.seq]
		if !ok || lost[h.part] {
			lost[h.part] = true
			continue
		}
		c.share, c.weight = w.Share, w.Weight
		t.page = append(t.page, c)
	}
	return nil
}

// queueServed advances the fair clock by the admitted rows, in the order
// admitted, and queues its save.
func (t *admitTxn) queueServed(w *pgx.Batch) {
	rs := make([]admit.FairRank, len(t.dec.Admitted))
	for j, i := range t.dec.Admitted {
		rs[j] = admit.FairRank{Share: t.rows[i].share, Weight: t.rows[i].weight}
	}
	if shares, finish := t.clock.ServedAll(rs); len(shares) > 0 {
		w.Queue(saveFairClockSQL, t.clock.V, shares, finish)
	}
}

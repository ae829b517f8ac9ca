package sqlitestore

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/admit"
	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/transport"
)

// A fair receive (store.ReceiveParams.Fair) decides on the window that
// admit.FairWindow chooses from each share's heads. It reads only the
// heads, in one statement: the distinct shares by a loose scan of
// idem_queue_fair, each share's first messages by priority through the
// same index, and for each head how many visible messages of its saga key
// come before it (idem_queue_key). Both indexes exist only where fair
// receives run: the first one a Store makes builds them.

// The expressions a fair receive reads of a queue row (alias q), as
// transport.FairnessOf reads the headers; the indexes hold the share,
// the priority and the key, and a query must spell them alike to use
// them. The key is the raw correlation ID, else the ID
// (transport.PartitionKey without its Unicode normalisation). A row whose
// envelope is not JSON (delivered to be dead-lettered) counts under its
// ID, in the share "". A share is the raw key, however long (SQLite's
// indexes take long values; transport.FairnessOf's digest of a long key
// only renames the share).
const (
	shareExpr  = `coalesce(json_extract(CASE WHEN json_valid(q.envelope) THEN q.envelope END, '$.headers."idem-fairness-key"'), '')`
	prioExpr   = `(CASE WHEN {P} GLOB '[0-9]' OR {P} GLOB '[0-9][0-9]' OR {P} GLOB '[0-9][0-9][0-9]' OR {P} GLOB '-[0-9]' OR {P} GLOB '-[0-9][0-9]' OR {P} GLOB '-[0-9][0-9][0-9]' THEN max(-100, min(100, CAST({P} AS INTEGER))) ELSE 0 END)`
	weightExpr = `(CASE WHEN {W} GLOB '[0-9]' OR {W} GLOB '[0-9][0-9]' OR {W} GLOB '[0-9][0-9][0-9]' OR {W} GLOB '[0-9][0-9][0-9][0-9]' THEN max(1, min(1000, CAST({W} AS INTEGER))) ELSE 1 END)`
	keyExpr    = `coalesce(nullif(json_extract(CASE WHEN json_valid(q.envelope) THEN q.envelope END, '$.correlation_id'), ''), q.id)`
)

// fairExprs spells the expressions for the alias a.
func fairExprs(a string) *strings.Replacer {
	p := strings.ReplaceAll(prioExpr, "{P}", `json_extract(CASE WHEN json_valid(q.envelope) THEN q.envelope END, '$.headers."idem-priority"')`)
	w := strings.ReplaceAll(weightExpr, "{W}", `json_extract(CASE WHEN json_valid(q.envelope) THEN q.envelope END, '$.headers."idem-fairness-weight"')`)
	as := a + "."
	if a == "" {
		as = "" // an index's expressions name the columns bare
	}
	return strings.NewReplacer("SHARE("+a+")", strings.ReplaceAll(shareExpr, "q.", as),
		"PRIO("+a+")", strings.ReplaceAll(p, "q.", as),
		"WEIGHT("+a+")", strings.ReplaceAll(w, "q.", as),
		"KEY("+a+")", strings.ReplaceAll(keyExpr, "q.", as))
}

// spell replaces SHARE(a), PRIO(a), WEIGHT(a) and KEY(a) in q for the
// aliases given.
func spell(q string, aliases ...string) string {
	for _, a := range aliases {
		q = fairExprs(a).Replace(q)
	}
	return q
}

// fairIndexesSQL builds the indexes of fair receives.
var fairIndexesSQL = spell(`
CREATE INDEX IF NOT EXISTS idem_queue_fair ON idem_queue (SHARE(), PRIO() DESC, visible_at, seq);
CREATE INDEX IF NOT EXISTS idem_queue_key ON idem_queue (KEY(), visible_at, seq);`, "")

// fairHeadsSQL reads each share's heads (?2 per share) visible at ?1, in
// queue order, with the share's finish tag and the visible messages of
// the head's key before it (counted up to ?2 + 1).
var fairHeadsSQL = spell(`
WITH RECURSIVE shares(s) AS (
  SELECT min(SHARE(m)) FROM idem_queue m
  UNION ALL
  SELECT (SELECT min(SHARE(m)) FROM idem_queue m WHERE SHARE(m) > shares.s) FROM shares WHERE shares.s IS NOT NULL
)
SELECT q.seq, KEY(q), SHARE(q), PRIO(q), WEIGHT(q), coalesce(f.finish, 0),
  (SELECT count(*) FROM (SELECT 1 FROM idem_queue e WHERE KEY(e) = KEY(q) AND e.visible_at <= ?1
     AND (e.visible_at < q.visible_at OR (e.visible_at = q.visible_at AND e.seq < q.seq)) LIMIT ?2 + 1))
FROM shares JOIN idem_queue q ON q.seq IN (
  SELECT i.seq FROM idem_queue i WHERE SHARE(i) = shares.s AND i.visible_at <= ?1 ORDER BY PRIO(i) DESC, i.visible_at, i.seq LIMIT ?2)
LEFT JOIN idem_fair_shares f ON f.share = SHARE(q)
WHERE shares.s IS NOT NULL
ORDER BY q.visible_at, q.seq`, "m", "q", "e", "i")

// fairOrder is a fair receive's window and the clock it was ranked
// under.
type fairOrder struct {
	seqs  []int64                  // the window's rows, in its order
	ranks map[int64]admit.FairRank // by row
	clock admit.FairClock
}

// ensureFairIndexes builds the indexes of fair receives once per Store; a
// failure is logged, and fair receives go on without them (slower).
func (s *Store) ensureFairIndexes(ctx context.Context) {
	s.fairIndexes.Do(func() {
		err := s.write(ctx, "fair indexes", leaseOnly, func(w *writer) error { return w.raw(fairIndexesSQL) })
		if err != nil {
			s.log.Warn("sqlitestore: building the indexes of fair receives failed; fair receives read more of the backlog until a restart builds them", "error", err)
		}
	})
}

// fairWindow ranks the heads under the stored clock and returns the
// window of n (admit.FairWindow).
func (w *writer) fairWindow(now time.Time, n int) (*fairOrder, error) {
	fo := &fairOrder{ranks: map[int64]admit.FairRank{}}
	if err := w.fairClock(&fo.clock); err != nil {
		return nil, err
	}
	rows, err := w.query(fairHeadsSQL, micros(now), n)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var seqs []int64
	var heads []admit.FairRow
	for rows.Next() {
		var seq int64
		var h admit.FairRow
		var finish float64
		if err := rows.Scan(&seq, &h.PartKey, &h.Key, &h.Priority, &h.Weight, &finish, &h.Earlier); err != nil {
			return nil, err
		}
		if _, ok := fo.clock.Finish[h.Key]; !ok {
			fo.clock.Finish[h.Key] = finish
		}
		seqs, heads = append(seqs, seq), append(heads, h)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, r := range admit.FairWindow(heads, &fo.clock, n) {
		fo.seqs = append(fo.seqs, seqs[r.Index])
		fo.ranks[seqs[r.Index]] = r
	}
	return fo, nil
}

// fairClock reads the stored clock into c.
func (w *writer) fairClock(c *admit.FairClock) error {
	c.Finish = map[string]float64{}
	rows, err := w.query(`SELECT v FROM idem_fair_clock WHERE id = 1`)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(&c.V); err != nil {
			return err
		}
	}
	return rows.Err()
}

// served advances the clock by the admitted rows, in the order admitted,
// and stores it: the shares whose finish is past the new V, the others
// dropped (they start at V, as an absent one does).
func (w *writer) served(fo *fairOrder, seqs []int64, admitted []int) error {
	c := &fo.clock
	rs := make([]admit.FairRank, len(admitted))
	for j, i := range admitted {
		rs[j] = fo.ranks[seqs[i]]
	}
	shares, finish := c.ServedAll(rs)
	if len(shares) == 0 {
		return nil
	}
	if _, err := w.exec(`UPDATE idem_fair_clock SET v = ?1 WHERE id = 1`, c.V); err != nil {
		return err
	}
	for i, share := range shares {
		if finish[i] > c.V {
			if _, err := w.exec(`INSERT INTO idem_fair_shares (share, finish) VALUES (?1, ?2) ON CONFLICT (share) DO UPDATE SET finish = excluded.finish`, share, finish[i]); err != nil {
				return err
			}
		}
	}
	_, err := w.exec(`DELETE FROM idem_fair_shares WHERE finish <= ?1`, c.V)
	return err
}

// fairPageSQL reads the rows whose seqs the JSON array ?1 lists.
const fairPageSQL = `SELECT seq, id, envelope, body, attempt, visible_at, refused_name, refused_key, refused_attempt FROM idem_queue WHERE seq IN (SELECT value FROM json_each(?1))`

// fairPage reads the window's rows, in its order, as candidates does.
// (The writer's transaction holds the database: nobody leased them since
// they were ranked.) It adds the refusals the rows hold to rec.
func (w *writer) fairPage(want []int64, now time.Time, tok string, rec map[int64]recorded) ([]transport.Delivery, []int64, error) {
	if len(want) == 0 {
		return nil, nil, nil
	}
	list, _ := json.Marshal(want)
	rows, err := w.query(fairPageSQL, string(list))
	if err != nil {
		return nil, nil, err
	}
	defer rows.Close()
	bySeq := make(map[int64]transport.Delivery, len(want))
	for rows.Next() {
		var seq int64
		var attempt int
		var id, meta string
		var body []byte
		var visible int64
		var r recordedCols
		if err := rows.Scan(&seq, &id, &meta, &body, &attempt, &visible, &r.name, &r.key, &r.attempt); err != nil {
			return nil, nil, err
		}
		r.add(rec, seq)
		env, err := sqlq.DecodeEnvelope([]byte(meta), body)
		if err != nil {
			env = transport.Envelope{ID: id, Body: body} // as candidates
		}
		bySeq[seq] = transport.Delivery{Envelope: env, Attempt: attempt + 1, Token: sqlq.FormatToken(seq, tok),
			Admitted: true, Waited: max(now.Sub(fromMicros(visible)), 0)}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, err
	}
	ds := make([]transport.Delivery, 0, len(want))
	seqs := make([]int64, 0, len(want))
	for _, seq := range want {
		if d, ok := bySeq[seq]; ok {
			ds, seqs = append(ds, d), append(seqs, seq)
		}
	}
	return ds, seqs, nil
}

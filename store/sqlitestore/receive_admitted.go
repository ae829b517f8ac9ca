package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idemhq/idem/internal/admit"
	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

var _ store.AdmittingQueue = (*Store)(nil)

// admitWindow is how many visible messages a fair admitting receive looks
// at per delivery it may return (admit.WindowPerDelivery).
const admitWindow = admit.WindowPerDelivery

// candidatesSQL reads a window of ?2 visible messages, in Receive's
// order, after the row (?3, ?4) (visible_at, seq) looked at last.
const candidatesSQL = `
SELECT seq, id, envelope, body, attempt, visible_at, refused_name, refused_key, refused_attempt FROM idem_queue
WHERE visible_at <= ?1 AND (visible_at > ?3 OR (visible_at = ?3 AND seq > ?4))
ORDER BY visible_at, seq
LIMIT ?2`

const leaseAdmittedSQL = `UPDATE idem_queue SET attempt = attempt + 1, token = ?2, visible_at = ?3 WHERE seq = ?1`

// recordRefusalSQL records on row ?1 the counter (?2, ?3) that refused it
// at its attempt ?4 (the row's own: a later lease increments attempt,
// which makes the record stale), and its partition's hash ?5.
const recordRefusalSQL = `UPDATE idem_queue SET refused_name = ?2, refused_key = ?3, refused_attempt = ?4, refused_part = ?5 WHERE seq = ?1`

// ReceiveAdmitted is Receive that admits as it leases (see
// store.AdmittingQueue): in one write transaction it reads a window of
// p.Max visible messages (and, while a full window admits
// fewer than p.Max, the next of 4 × p.Max, up to admit.MaxPages), computes their needs, decides,
// takes the holds (expiring with the lease) and leases the admitted
// messages. The queue has no partitions: p.Parts above 1 is refused. A
// release through this Store wakes it; one by another process is seen at
// Config.PollInterval.
func (s *Store) ReceiveAdmitted(ctx context.Context, p *store.ReceiveParams) ([]transport.Delivery, error) {
	if p == nil {
		p = &store.ReceiveParams{}
	}
	if p.Parts > 1 {
		return nil, fmt.Errorf("sqlitestore: receive admitted: ReceiveParams.Parts is %d, but this queue has no partitions: give 0 or 1", p.Parts)
	}
	if p.Fair {
		s.ensureFairIndexes(ctx)
	}
	return s.poller().Receive(ctx, "sqlitestore: receive admitted", p.Changed, func(ctx context.Context) ([]transport.Delivery, time.Time, error) {
		ds, next, err := s.claimAdmitted(ctx, p)
		if err != nil {
			err = fmt.Errorf("sqlitestore: receive admitted: %w", err)
		}
		return ds, next, err
	})
}

// claimAdmitted is one admitting receive: the deliveries, or when none the
// time to look again (zero: at the next wake or poll).
func (s *Store) claimAdmitted(ctx context.Context, p *store.ReceiveParams) ([]transport.Delivery, time.Time, error) {
	var next sql.NullInt64
	if err := s.rdb.QueryRowContext(ctx, `SELECT min(visible_at) FROM idem_queue`).Scan(&next); err != nil {
		return nil, time.Time{}, err
	}
	if !next.Valid {
		return nil, time.Time{}, nil
	}
	if nextAt := fromMicros(next.Int64); nextAt.After(time.Now()) {
		return nil, nextAt, nil
	}
	var out []transport.Delivery
	var wait time.Duration
	err := s.write(ctx, "receive", leaseOnly, func(w *writer) error {
		var err error
		out, wait, err = w.receiveAdmitted(p, s.cfg.Lease)
		return err
	})
	if err != nil || len(out) > 0 {
		return out, time.Time{}, err
	}
	if err := s.rdb.QueryRowContext(ctx, `SELECT min(visible_at) FROM idem_queue WHERE visible_at > ?1`, micros(time.Now())).Scan(&next); err != nil {
		return nil, time.Time{}, err
	}
	at := fromNullMicros(next)
	if wait > 0 && (at.IsZero() || time.Now().Add(wait).Before(at)) {
		at = time.Now().Add(wait)
	}
	return nil, at, nil
}

// receiveAdmitted decides on the window of visible messages and leases
// those admitted, inside the writer's transaction. It returns them, and
// the shortest wait of a refusal by a rate.
func (w *writer) receiveAdmitted(p *store.ReceiveParams, lease time.Duration) ([]transport.Delivery, time.Duration, error) {
	now := time.Now()
	n := max(p.Max, 1)
	tok := sqlq.HeldPrefix + sqlq.NewToken()
	ds, seqs, dec, err := w.decidePages(p, now, n, tok)
	if err != nil || len(ds) == 0 {
		return nil, 0, err
	}
	if err := w.recordRefusals(dec, ds, seqs); err != nil {
		return nil, 0, err
	}
	cs := dec.cs
	exp := micros(now.Add(lease))
	out := make([]transport.Delivery, len(dec.Admitted))
	for j, i := range dec.Admitted {
		for _, k := range dec.Holds[j] {
			if _, err := w.exec(insertHoldSQL, k.Name, k.Key, ds[i].Token, exp); err != nil {
				return nil, 0, err
			}
		}
		if _, err := w.exec(leaseAdmittedSQL, seqs[i], tok, exp); err != nil {
			return nil, 0, err
		}
		out[j] = ds[i]
	}
	slices.SortFunc(out, func(a, b transport.Delivery) int { return cmp.Compare(seqOf(a), seqOf(b)) }) // enqueue order, as Receive
	if dec.fair != nil {
		if err := w.served(dec.fair, seqs, dec.Admitted); err != nil {
			return nil, 0, err
		}
	}
	for k, c := range cs {
		if c.Refilled {
			if _, err := w.exec(saveBucketSQL, k.Name, k.Key, c.Tokens, micros(c.RefilledAt)); err != nil {
				return nil, 0, err
			}
		}
	}
	return out, dec.Wait, nil
}

// pages is what an admitting receive decided over its pages: the
// counters it read and the decision.
type pages struct {
	*admit.QueueDecision
	cs   map[store.LimitKey]*admit.Counter
	fair *fairOrder         // with ReceiveParams.Fair
	rec  map[int64]recorded // the refusals the rows read hold, by seq
}

// decidePages reads windows of candidates (admit.PageWindow) and decides
// them, page after page while a full page admitted fewer than n (see
// admit.QueueDecision.MorePages). It returns every candidate looked at,
// as deliveries leased under tok, with their rows.
func (w *writer) decidePages(p *store.ReceiveParams, now time.Time, n int, tok string) ([]transport.Delivery, []int64, pages, error) {
	pg := pages{QueueDecision: &admit.QueueDecision{Covering: p.Covering}, cs: map[store.LimitKey]*admit.Counter{}, rec: map[int64]recorded{}}
	var ds []transport.Delivery
	var seqs []int64
	after := cursor{at: -1 << 63}
	for page := 1; ; page++ {
		var got []transport.Delivery
		var gseqs []int64
		var next cursor
		var err error
		if p.Fair {
			pg.fair, err = w.fairWindow(now, admitWindow*n)
			if err == nil {
				got, gseqs, err = w.fairPage(pg.fair.seqs, now, tok, pg.rec)
			}
		} else {
			got, gseqs, next, err = w.candidates(now, admit.PageWindow(page, n), tok, after, pg.rec)
		}
		if err != nil {
			return nil, nil, pg, err
		}
		cands, err := candidatesOf(p, got)
		if err != nil {
			return nil, nil, pg, err
		}
		if err := w.addCounters(pg.cs, admit.KeysOf(p.Limits, cands), now); err != nil {
			return nil, nil, pg, err
		}
		pg.Page(p.Limits, cands, pg.cs, now, n)
		ds, seqs, after = append(ds, got...), append(seqs, gseqs...), next
		if p.Fair || !pg.MorePages(page, len(got), n) { // a fair receive decides on one window
			return ds, seqs, pg, nil
		}
	}
}

// candidatesOf computes the needs of the deliveries ds, which it checks.
func candidatesOf(p *store.ReceiveParams, ds []transport.Delivery) ([]admit.Candidate, error) {
	cands := make([]admit.Candidate, len(ds))
	reqs := make([]store.AdmitRequest, len(ds))
	for i := range ds {
		cands[i] = admit.Candidate{Holder: ds[i].Token, PartKey: transport.PartitionKey(&ds[i].Envelope)}
		if p.Needs != nil {
			cands[i].Keys = p.Needs(&ds[i].Envelope)
		}
		reqs[i] = store.AdmitRequest{Holder: cands[i].Holder, Keys: cands[i].Keys}
	}
	return cands, admit.Validate(reqs)
}

// addCounters reads into cs the counters of keys it does not hold yet.
func (w *writer) addCounters(cs map[store.LimitKey]*admit.Counter, keys []store.LimitKey, now time.Time) error {
	keys = slices.DeleteFunc(keys, func(k store.LimitKey) bool { return cs[k] != nil })
	more, err := w.counters(keys, now)
	maps.Copy(cs, more)
	return err
}

// cursor is the (visible_at, seq) of the last row a page looked at.
type cursor struct{ at, seq int64 }

// candidates reads up to n visible messages in Receive's order after the
// row after, as the deliveries they become when leased under tok, with
// their rows and the cursor of the last. It adds the refusals the rows
// hold to rec.
func (w *writer) candidates(now time.Time, n int, tok string, after cursor, rec map[int64]recorded) ([]transport.Delivery, []int64, cursor, error) {
	rows, err := w.query(candidatesSQL, micros(now), n, after.at, after.seq)
	if err != nil {
		return nil, nil, after, err
	}
	defer rows.Close()
	var ds []transport.Delivery
	var seqs []int64
	for rows.Next() {
		var seq int64
		var attempt int
		var id, meta string
		var body []byte
		var r recordedCols
		if err := rows.Scan(&seq, &id, &meta, &body, &attempt, &after.at, &r.name, &r.key, &r.attempt); err != nil {
			return nil, nil, after, err
		}
		r.add(rec, seq)
		after.seq = seq
		env, err := sqlq.DecodeEnvelope([]byte(meta), body)
		if err != nil {
			// As Receive: handed out with what is known, for the engine
			// to dead-letter.
			env = transport.Envelope{ID: id, Body: body}
		}
		ds = append(ds, transport.Delivery{Envelope: env, Attempt: attempt + 1, Token: sqlq.FormatToken(seq, tok),
			Admitted: true, Waited: max(now.Sub(fromMicros(after.at)), 0)})
		seqs = append(seqs, seq)
	}
	return ds, seqs, after, rows.Err()
}

// seqOf is the queue row of a delivery of this store.
func seqOf(d transport.Delivery) int64 {
	seq, _, _ := sqlq.ParseToken(d.Token)
	return seq
}

// recorded is the refusal a queue row holds: the counter and the row's
// attempt when it was recorded.
type recorded struct {
	by      store.LimitKey
	attempt int64
}

// recordedCols scans the refusal columns of a queue row.
type recordedCols struct {
	name, key sql.NullString
	attempt   sql.NullInt64
}

// add adds the refusal row seq holds, if any, to rec.
func (r *recordedCols) add(rec map[int64]recorded, seq int64) {
	if r.name.Valid && r.attempt.Valid {
		rec[seq] = recorded{by: store.LimitKey{Name: r.name.String, Key: r.key.String}, attempt: r.attempt.Int64}
	}
}

// recordRefusals records the refusals of dec that differ from what their
// rows hold (ds and seqs are the candidates decided), so that a backlog
// refused receive after receive is written once per message.
func (w *writer) recordRefusals(dec pages, ds []transport.Delivery, seqs []int64) error {
	for _, r := range dec.Refusals {
		seq, at := seqs[r.Index], int64(ds[r.Index].Attempt-1) // the row's attempt
		if old, ok := dec.rec[seq]; ok && old.by == r.By && old.attempt == at {
			continue
		}
		part := int64(transport.PartitionHash(transport.PartitionKey(&ds[r.Index].Envelope)))
		if _, err := w.exec(recordRefusalSQL, seq, r.By.Name, r.By.Key, at, part); err != nil {
			return err
		}
	}
	return nil
}

package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/admit"
	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

var _ store.AdmittingQueue = (*Store)(nil)

// admitWindow is how many visible messages an admitting receive looks at
// per delivery it may return.
const admitWindow = 4

// candidatesSQL locks the window of visible messages an admitting receive
// decides on, in Receive's order, skipping those another consumer holds.
const candidatesSQL = `
SELECT seq, envelope, body, attempt, visible_at, extract(epoch FROM now() - visible_at)::float8 FROM idem_queue
WHERE visible_at <= now()
  AND ($3 < 2 OR mod(part, $3) = $2)
ORDER BY visible_at, seq
LIMIT $1
FOR UPDATE SKIP LOCKED`

// candidatesAfterSQL is candidatesSQL for the next page: the window after
// the row ($4, $5), the (visible_at, seq) looked at last.
const candidatesAfterSQL = `
SELECT seq, envelope, body, attempt, visible_at, extract(epoch FROM now() - visible_at)::float8 FROM idem_queue
WHERE visible_at <= now()
  AND ($3 < 2 OR mod(part, $3) = $2)
  AND (visible_at, seq) > ($4, $5)
ORDER BY visible_at, seq
LIMIT $1
FOR UPDATE SKIP LOCKED`

// fairCandidatesSQL is candidatesSQL in fair order (store.ReceiveParams.Fair;
// admit.FairOrder is the reference, which storetest holds this to): page
// $4 (from 0) of the visible messages ranked by start tag under the fair
// clock (idem_fair_clock, idem_fair_shares), with each row's share, its
// weight and the share's finish tag. A message's share and priority come
// from its headers, read as transport.FairnessOf reads them; the rows of
// one partition (part, the hash of the partition key) count in the share
// of its first row, at the highest priority among them. The ranking is
// read again for each page (a new snapshot): a row seen on an earlier
// page may come again, and the caller drops it.
const fairCandidatesSQL = `
WITH v AS (
  SELECT seq, visible_at, part,
    coalesce(envelope->'headers'->>'idem-fairness-key', '') AS share,
    CASE WHEN envelope->'headers'->>'idem-fairness-weight' ~ '^[0-9]{1,4}$'
      THEN least(greatest((envelope->'headers'->>'idem-fairness-weight')::int, 1), 1000) ELSE 1 END AS weight,
    CASE WHEN envelope->'headers'->>'idem-priority' ~ '^-?[0-9]{1,3}$'
      THEN least(greatest((envelope->'headers'->>'idem-priority')::int, -100), 100) ELSE 0 END AS prio
  FROM idem_queue
  WHERE visible_at <= now() AND ($3 < 2 OR mod(part, $3) = $2)
), k AS (
  SELECT seq, visible_at, weight,
    first_value(share) OVER (PARTITION BY part ORDER BY visible_at, seq) AS share,
    max(prio) OVER (PARTITION BY part) AS prio
  FROM v
), r AS (
  SELECT seq, visible_at, prio, share,
    max(weight) OVER (PARTITION BY share) AS weight,
    row_number() OVER (PARTITION BY share ORDER BY prio DESC, visible_at, seq) - 1 AS n
  FROM k
), s AS (
  SELECT r.*, coalesce(f.finish, 0) AS finish,
    greatest((SELECT c.v FROM idem_fair_clock c WHERE c.id = 1), coalesce(f.finish, 0)) + r.n::float8 / r.weight::float8 AS start
  FROM r LEFT JOIN idem_fair_shares f ON f.share = r.share
)
SELECT q.seq, q.envelope, q.body, q.attempt, q.visible_at, extract(epoch FROM now() - q.visible_at)::float8, s.share, s.weight, s.finish FROM idem_queue q JOIN s ON q.seq = s.seq
WHERE q.visible_at <= now()
ORDER BY s.start, s.prio DESC, s.visible_at, s.seq
LIMIT $1::int OFFSET $4::int * $1::int
FOR UPDATE OF q SKIP LOCKED`

// lockFairClockSQL locks the fair clock: fair receives take turns, each
// ranking under the tags the last one wrote.
const lockFairClockSQL = `SELECT v FROM idem_fair_clock WHERE id = 1 FOR UPDATE`

// saveFairClockSQL stores the clock $1 and the finish tags $3 of the
// shares $2 past it, and drops the shares at or before it.
const saveFairClockSQL = `
WITH c AS (UPDATE idem_fair_clock SET v = $1 WHERE id = 1),
d AS (DELETE FROM idem_fair_shares WHERE finish <= $1 AND NOT share = ANY($2::text[]))
INSERT INTO idem_fair_shares (share, finish)
SELECT * FROM unnest($2::text[], $3::float8[]) AS u(share, finish) WHERE u.finish > $1
ON CONFLICT (share) DO UPDATE SET finish = excluded.finish`

// leaseAdmittedSQL leases the admitted rows $1 under token $2 for $3
// seconds, as receiveSQL does.
const leaseAdmittedSQL = `
UPDATE idem_queue q SET attempt = q.attempt + 1, token = $2, visible_at = now() + make_interval(secs => $3)
FROM unnest($1::bigint[]) AS u(seq)
WHERE q.seq = u.seq`

// nextVisibleSQL is the next time a message of the partition becomes
// visible: messages visible now were looked at and refused.
const nextVisibleSQL = `SELECT min(visible_at) FROM idem_queue WHERE visible_at > now() AND ($2 < 2 OR mod(part, $2) = $1)`

// ReceiveAdmitted is ReceivePartition that admits as it leases (see
// store.AdmittingQueue): in one transaction it locks a window of
// admitWindow × p.Max visible messages (SKIP LOCKED), and the next while
// a full window admitted fewer than p.Max (see admitTxn), computes their
// needs, locks their counters in (Name, Key) order, decides, takes the
// holds (expiring with the lease) and leases the admitted messages. A
// release by this process wakes it; a release by another process is
// seen at the next notification or Config.PollInterval.
func (s *Store) ReceiveAdmitted(ctx context.Context, p *store.ReceiveParams) ([]transport.Delivery, error) {
	if p == nil {
		p = &store.ReceiveParams{}
	}
	s.startListener()
	return s.poller().Receive(ctx, "pgstore: receive admitted", p.Changed, func(ctx context.Context) ([]transport.Delivery, time.Time, error) {
		ds, next, err := s.receiveAdmitted(ctx, p)
		if err != nil {
			err = fmt.Errorf("pgstore: receive admitted: %w", err)
		}
		return ds, next, err
	})
}

// candidate is a locked queue row an admitting receive decides on.
type candidate struct {
	seq     int64
	visible time.Time
	waited  float64 // seconds visible before this receive
	d       transport.Delivery
	// In fair order: its share, the share's weight and finish tag.
	fair   bool
	share  string
	weight int
	finish float64
}

// admitAttempts bounds the transactions of one admitting receive: a page
// that needs a counter ordered before one already locked rolls the
// transaction back, and the next locks every counter seen so far up
// front, in order. Each restart adds the keys of at least one page, so
// with a keyed limit (a tenant per page) paging still reaches its
// admit.MaxPages windows; the last attempt decides what it could lock in
// order.
const admitAttempts = admit.MaxPages

// receiveAdmitted is one admitting receive: the deliveries, or when none
// the time to look again (zero: at the next wake or poll).
func (s *Store) receiveAdmitted(ctx context.Context, p *store.ReceiveParams) ([]transport.Delivery, time.Time, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, time.Time{}, redact(err)
	}
	defer conn.Release()
	var pre []store.LimitKey
	var out []transport.Delivery
	var dec *admit.QueueDecision
	for attempt := 1; ; attempt++ {
		tx := &admitTxn{s: s, conn: conn, p: p, n: max(p.Max, 1), tok: sqlq.HeldPrefix + sqlq.NewToken(), last: attempt >= admitAttempts}
		out, dec, err = tx.run(ctx, pre)
		if err != nil && tx.restart != nil {
			pre = tx.restart // rolled back: again, with these locked first
			continue
		}
		break
	}
	if err != nil || len(out) > 0 {
		return out, time.Time{}, err
	}
	var next pgtype.Timestamptz
	if err := s.pool.QueryRow(ctx, nextVisibleSQL, p.Part, p.Parts).Scan(&next); err != nil {
		return nil, time.Time{}, translate(err)
	}
	at := nextTime(next)
	if dec.Wait > 0 && (at.IsZero() || time.Now().Add(dec.Wait).Before(at)) {
		at = time.Now().Add(dec.Wait)
	}
	return nil, at, nil
}

// admitTxn is the transaction of one admitting receive: it locks a window
// of admitWindow × n visible messages (SKIP LOCKED), locks the counters
// they need, decides, and while a full window admitted fewer than n pages
// on (admit.QueueDecision.MorePages), in the same transaction. Counters
// are locked in (Name, Key) order: a page that needs one ordered before a
// counter already locked ends the transaction with restart set (every
// counter seen), or, on the last attempt, ends the paging there.
type admitTxn struct {
	s    *Store
	conn *pgxpool.Conn
	p    *store.ReceiveParams
	n    int
	tok  string
	last bool

	rows    []candidate // every row decided, over the pages
	page    []candidate // the page being read
	read    int         // rows the page read, with those seen before
	seen    map[int64]bool
	pageNo  int // the fair page to read next
	locked  []store.LimitKey
	cs      map[store.LimitKey]*admit.Counter
	fresh   map[store.LimitKey]*admit.Counter // locked by the batch in flight
	now     time.Time
	dec     admit.QueueDecision
	restart []store.LimitKey
	clock   admit.FairClock // with Fair
}

// errRestart ends a transaction whose next page needs a counter out of
// order.
var errRestart = errors.New("a page needs a counter ordered before one already locked")

// run runs the transaction, with the counters pre locked first, and
// returns the admitted deliveries in enqueue order, as Receive does.
func (t *admitTxn) run(ctx context.Context, pre []store.LimitKey) ([]transport.Delivery, *admit.QueueDecision, error) {
	t.cs, t.now, t.seen = map[store.LimitKey]*admit.Counter{}, time.Now(), map[int64]bool{}
	b := &pgx.Batch{}
	b.Queue(beginSQL)
	if t.p.Fair {
		t.clock = admit.FairClock{Finish: map[string]float64{}}
		b.Queue(lockFairClockSQL).QueryRow(func(r pgx.Row) error { return r.Scan(&t.clock.V) })
	}
	if len(pre) > 0 {
		t.queueLock(b, pre)
	}
	t.queuePage(b, nil)
	var out []transport.Delivery
	err := t.s.admitTx(ctx, t.conn, b, func() (*pgx.Batch, error) {
		if err := t.pages(ctx); err != nil {
			return nil, err
		}
		var w *pgx.Batch
		w, out = t.commit()
		return w, nil
	})
	return out, &t.dec, err
}

// queueLock queues the lock of keys (sorted, none locked yet) into
// t.fresh; merge moves them into t.cs once the batch has run.
func (t *admitTxn) queueLock(b *pgx.Batch, keys []store.LimitKey) {
	queueLock(b, keys, &t.fresh, &t.now)
	t.locked = append(t.locked, keys...)
	slices.SortFunc(t.locked, store.LimitKey.Compare)
}

// merge moves the counters a batch locked into t.cs.
func (t *admitTxn) merge() {
	maps.Copy(t.cs, t.fresh)
	t.fresh = nil
}

// queuePage queues the read of the next page into t.page: the first when
// after is nil, else the one after that row.
func (t *admitTxn) queuePage(b *pgx.Batch, after *candidate) {
	t.page, t.read = t.page[:0], 0
	scan := func(r pgx.Rows) error {
		for r.Next() {
			t.read++
			var c candidate
			var meta, body []byte
			if t.p.Fair {
				c.fair = true
				if err := r.Scan(&c.seq, &meta, &body, &c.d.Attempt, &c.visible, &c.waited, &c.share, &c.weight, &c.finish); err != nil {
					return err
				}
			} else if err := r.Scan(&c.seq, &meta, &body, &c.d.Attempt, &c.visible, &c.waited); err != nil {
				return err
			}
			env, err := sqlq.DecodeEnvelope(meta, body)
			if err != nil {
				return err
			}
			if t.seen[c.seq] {
				continue // a fair page's ranking moved it after an earlier page
			}
			t.seen[c.seq] = true
			c.d = transport.Delivery{Envelope: env, Attempt: c.d.Attempt + 1, Token: sqlq.FormatToken(c.seq, t.tok),
				Admitted: true, Waited: max(time.Duration(c.waited*float64(time.Second)), 0)}
			t.page = append(t.page, c)
		}
		return r.Err()
	}
	w := admitWindow * t.n
	if t.p.Fair {
		b.Queue(fairCandidatesSQL, w, t.p.Part, t.p.Parts, t.pageNo).Query(scan)
		t.pageNo++
		return
	}
	if after == nil {
		b.Queue(candidatesSQL, w, t.p.Part, t.p.Parts).Query(scan)
		return
	}
	b.Queue(candidatesAfterSQL, w, t.p.Part, t.p.Parts, after.visible, after.seq).Query(scan)
}

// pages decides the page read, locking its counters first, and reads and
// decides the next while MorePages says so.
func (t *admitTxn) pages(ctx context.Context) error {
	t.merge() // the first batch's
	for page := 1; ; page++ {
		cands, err := t.candidates()
		if err != nil {
			return err
		}
		keys := slices.DeleteFunc(admit.KeysOf(t.p.Limits, cands), func(k store.LimitKey) bool { return t.cs[k] != nil })
		if len(keys) > 0 && len(t.locked) > 0 && keys[0].Compare(t.locked[len(t.locked)-1]) < 0 {
			if t.last {
				return nil // decided what it could lock in order
			}
			t.restart = slices.SortedFunc(slices.Values(append(slices.Clone(t.locked), keys...)), store.LimitKey.Compare)
			return errRestart
		}
		b := &pgx.Batch{}
		if len(keys) > 0 {
			t.queueLock(b, keys)
			if err := t.conn.SendBatch(ctx, b).Close(); err != nil {
				return err
			}
			t.merge()
		}
		t.dec.Page(t.p.Limits, cands, t.cs, t.now, t.n)
		t.rows = append(t.rows, t.page...)
		if !t.dec.MorePages(page, admitWindow*t.n, t.read, t.n) {
			return nil
		}
		b = &pgx.Batch{}
		var last *candidate
		if len(t.page) > 0 {
			last = &t.page[len(t.page)-1]
		}
		t.queuePage(b, last)
		if err := t.conn.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
	}
}

// candidates computes the needs of the page's rows, which it checks.
func (t *admitTxn) candidates() ([]admit.Candidate, error) {
	cands := make([]admit.Candidate, len(t.page))
	reqs := make([]store.AdmitRequest, len(t.page))
	for i, r := range t.page {
		cands[i] = admit.Candidate{Holder: r.d.Token, PartKey: transport.PartitionKey(&r.d.Envelope)}
		if t.p.Needs != nil {
			cands[i].Keys = t.p.Needs(&r.d.Envelope)
		}
		reqs[i] = store.AdmitRequest{Holder: cands[i].Holder, Keys: cands[i].Keys}
	}
	return cands, admit.Validate(reqs)
}

// commit returns the batch of the holds, the leases and COMMIT, and the
// admitted deliveries in enqueue order.
func (t *admitTxn) commit() (*pgx.Batch, []transport.Delivery) {
	w := &pgx.Batch{}
	held := make([]store.AdmitRequest, len(t.dec.Admitted))
	seqs := make([]int64, len(t.dec.Admitted))
	out := make([]transport.Delivery, len(t.dec.Admitted))
	for j, i := range t.dec.Admitted {
		r := t.rows[i]
		held[j], seqs[j], out[j] = store.AdmitRequest{Holder: r.d.Token, Keys: t.dec.Holds[j]}, r.seq, r.d
	}
	queueHolds(w, held, t.dec.Holds, t.cs, t.now, t.s.cfg.Lease)
	if t.p.Fair {
		t.queueServed(w)
	}
	if len(seqs) > 0 {
		w.Queue(leaseAdmittedSQL, seqs, t.tok, t.s.cfg.Lease.Seconds())
	}
	w.Queue(`COMMIT`)
	slices.SortFunc(out, func(a, b transport.Delivery) int { return cmp.Compare(seqOf(a), seqOf(b)) })
	return w, out
}

// seqOf is the queue row of a delivery of this store.
func seqOf(d transport.Delivery) int64 {
	seq, _, _ := sqlq.ParseToken(d.Token)
	return seq
}

// queueServed advances the fair clock by the admitted rows, in the order
// admitted, and queues its save.
func (t *admitTxn) queueServed(w *pgx.Batch) {
	touched := map[string]bool{}
	for _, i := range t.dec.Admitted {
		r := t.rows[i]
		if _, ok := t.clock.Finish[r.share]; !ok {
			t.clock.Finish[r.share] = r.finish
		}
		t.clock.Served(r.share, r.weight)
		touched[r.share] = true
	}
	if len(touched) == 0 {
		return
	}
	shares := slices.Sorted(maps.Keys(touched))
	finish := make([]float64, len(shares))
	for i, sh := range shares {
		finish[i] = t.clock.Finish[sh]
	}
	w.Queue(saveFairClockSQL, t.clock.V, shares, finish)
}

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

// admitWindow is how many visible messages a fair admitting receive looks
// at per delivery it may return (admit.WindowPerDelivery).
const admitWindow = admit.WindowPerDelivery

// candidatesSQL locks the window of visible messages an admitting receive
// decides on, in Receive's order, skipping those another consumer holds.
const candidatesSQL = `
SELECT seq, envelope, body, attempt, visible_at, extract(epoch FROM now() - visible_at)::float8,
  refused_name, refused_key, refused_attempt FROM idem_queue
WHERE visible_at <= now()
  AND ($3 < 2 OR mod(part, $3) = $2)
ORDER BY visible_at, seq
LIMIT $1
FOR UPDATE SKIP LOCKED`

// candidatesAfterSQL is candidatesSQL for the next page: the window after
// the row ($4, $5), the (visible_at, seq) looked at last.
const candidatesAfterSQL = `
SELECT seq, envelope, body, attempt, visible_at, extract(epoch FROM now() - visible_at)::float8,
  refused_name, refused_key, refused_attempt FROM idem_queue
WHERE visible_at <= now()
  AND ($3 < 2 OR mod(part, $3) = $2)
  AND (visible_at, seq) > ($4, $5)
ORDER BY visible_at, seq
LIMIT $1
FOR UPDATE SKIP LOCKED`

// leaseAdmittedSQL leases the admitted rows $1 under token $2 for $3
// seconds, as receiveSQL does.
const leaseAdmittedSQL = `
UPDATE idem_queue q SET attempt = q.attempt + 1, token = $2, visible_at = now() + make_interval(secs => $3)
FROM unnest($1::bigint[]) AS u(seq)
WHERE q.seq = u.seq`

// recordRefusalsSQL records on the rows $1 the counters ($2, $3) that
// refused them at their attempts $4 (the rows' own, before this receive:
// a later lease increments attempt, which makes the record stale).
const recordRefusalsSQL = `
UPDATE idem_queue q SET refused_name = u.name, refused_key = u.key, refused_attempt = u.attempt
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::int[]) AS u(seq, name, key, attempt)
WHERE q.seq = u.seq`

// lockCountersIfVisibleSQL is lockCountersSQL when a message of the
// partition ($3 of $4) is visible that no other transaction holds (the
// receive's own window, locked before it, counts), else nothing: a
// receive that found nothing to take, the queue empty or its head held
// by other receivers, neither waits for the counters' locks nor writes
// them.
const lockCountersIfVisibleSQL = `
INSERT INTO idem_limit_counters (name, key, refilled_at)
SELECT u.name, u.key, clock_timestamp() FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(name, key, ord)
WHERE EXISTS (SELECT 1 FROM idem_queue WHERE visible_at <= now() AND ($4 < 2 OR mod(part, $4) = $3) ORDER BY visible_at, seq LIMIT 1 FOR UPDATE SKIP LOCKED)
ORDER BY u.ord
ON CONFLICT (name, key) DO UPDATE
SET refilled_at = CASE WHEN idem_limit_counters.tokens IS NULL THEN excluded.refilled_at ELSE idem_limit_counters.refilled_at END
RETURNING name, key, tokens, refilled_at, clock_timestamp()`

// nextVisibleSQL is the next time a message of the partition becomes
// visible: messages visible now were looked at and refused.
const nextVisibleSQL = `SELECT min(visible_at) FROM idem_queue WHERE visible_at > now() AND ($2 < 2 OR mod(part, $2) = $1)`

// ReceiveAdmitted is ReceivePartition that admits as it leases (see
// store.AdmittingQueue): in one transaction it locks a window of
// p.Max visible messages (SKIP LOCKED), and the next (4 × p.Max) while
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
	if p.Fair {
		s.ensureFairIndexes(ctx)
	}
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
	// With Fair: its share and the share's weight.
	share  string
	weight int
	// The refusal recorded on the row (refusedAttempt -1: none).
	refused        store.LimitKey
	refusedAttempt int32
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
// of visible messages (SKIP LOCKED; admit.PageWindow), locks the counters
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
	pageNo  int         // its number, from 1
	heads   []fairHead  // with Fair: the shares' heads
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
	t.cs, t.now = map[store.LimitKey]*admit.Counter{}, time.Now()
	t.dec.Covering = t.p.Covering
	b := &pgx.Batch{}
	b.Queue(beginSQL)
	if t.p.Fair {
		t.queueClock(b)
	}
	if len(pre) > 0 {
		t.queueLock(b, pre)
	}
	if t.p.Fair {
		t.queueHeads(b)
	} else {
		t.queuePage(b, nil)
	}
	if len(pre) == 0 {
		t.queueCovering(b)
	}
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

// queueCovering queues, when every limit in force is covering
// (ReceiveParams.Covering: every message needs their counters, and no
// other counter can sort before them), the lock of their counters into
// t.fresh, in the first batch, so that the receive decides without a
// round trip of its own for them. It locks them only when a message is
// visible, so that an empty receive writes nothing.
func (t *admitTxn) queueCovering(b *pgx.Batch) {
	keys := coveringKeys(t.p)
	if len(keys) == 0 {
		return
	}
	queueLockWith(b, lockCountersIfVisibleSQL, []any{t.p.Part, t.p.Parts}, keys, &t.fresh, &t.now)
	t.locked = append(t.locked, keys...)
	slices.SortFunc(t.locked, store.LimitKey.Compare)
}

// coveringKeys returns the counters of p.Covering, in order, when every
// limit of p.Limits that governs is among them; else nil.
func coveringKeys(p *store.ReceiveParams) []store.LimitKey {
	var keys []store.LimitKey
	for name, l := range p.Limits {
		if l.Concurrency <= 0 && l.Rate <= 0 {
			continue
		}
		if !slices.Contains(p.Covering, name) {
			return nil
		}
		keys = append(keys, store.LimitKey{Name: name})
	}
	slices.SortFunc(keys, store.LimitKey.Compare)
	return keys
}

// merge moves the counters a batch locked into t.cs.
func (t *admitTxn) merge() {
	maps.Copy(t.cs, t.fresh)
	t.fresh = nil
}

// queuePage queues the read of the next page into t.page: the first when
// after is nil, else the one after that row.
func (t *admitTxn) queuePage(b *pgx.Batch, after *candidate) {
	t.page = t.page[:0]
	t.pageNo++
	w := admit.PageWindow(t.pageNo, t.n)
	if after == nil {
		b.Queue(candidatesSQL, w, t.p.Part, t.p.Parts).Query(t.scanPage)
		return
	}
	b.Queue(candidatesAfterSQL, w, t.p.Part, t.p.Parts, after.visible, after.seq).Query(t.scanPage)
}

// scanPage appends the rows of a candidates query to t.page.
func (t *admitTxn) scanPage(r pgx.Rows) error {
	for r.Next() {
		var c candidate
		var meta, body []byte
		var name, key pgtype.Text
		var at pgtype.Int4
		if err := r.Scan(&c.seq, &meta, &body, &c.d.Attempt, &c.visible, &c.waited, &name, &key, &at); err != nil {
			return err
		}
		c.refused, c.refusedAttempt = store.LimitKey{Name: name.String, Key: key.String}, -1
		if name.Valid && at.Valid {
			c.refusedAttempt = at.Int32
		}
		env, err := sqlq.DecodeEnvelope(meta, body)
		if err != nil {
			return err
		}
		c.d = transport.Delivery{Envelope: env, Attempt: c.d.Attempt + 1, Token: sqlq.FormatToken(c.seq, t.tok),
			Admitted: true, Waited: max(time.Duration(c.waited*float64(time.Second)), 0)}
		t.page = append(t.page, c)
	}
	return r.Err()
}

// pages decides the page read, locking its counters first, and reads and
// decides the next while MorePages says so.
func (t *admitTxn) pages(ctx context.Context) error {
	t.merge() // the first batch's
	if t.p.Fair {
		if err := t.lockWindow(ctx); err != nil {
			return err
		}
	}
	for {
		cands, err := t.candidates()
		if err != nil {
			return err
		}
		keys := slices.DeleteFunc(admit.KeysOf(t.p.Limits, cands), func(k store.LimitKey) bool { return t.cs[k] != nil })
		if len(keys) > 0 && len(t.locked) > 0 && keys[0].Compare(t.locked[len(t.locked)-1]) < 0 {
			if t.last {
				return nil // decided what it could lock in order
			}
			t.restart = slices.Compact(slices.SortedFunc(slices.Values(append(slices.Clone(t.locked), keys...)), store.LimitKey.Compare))
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
		if t.p.Fair || !t.dec.MorePages(t.pageNo, len(t.page), t.n) {
			return nil // a fair receive decides on one window
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
	t.queueRefusals(w)
	w.Queue(`COMMIT`)
	slices.SortFunc(out, func(a, b transport.Delivery) int { return cmp.Compare(seqOf(a), seqOf(b)) })
	return w, out
}

// seqOf is the queue row of a delivery of this store.
func seqOf(d transport.Delivery) int64 {
	seq, _, _ := sqlq.ParseToken(d.Token)
	return seq
}

// queueRefusals queues the record of the refusals that differ from what
// their rows hold (none: no statement), so that a backlog refused receive
// after receive is written once per message.
func (t *admitTxn) queueRefusals(w *pgx.Batch) {
	var seqs []int64
	var names, keys []string
	var attempts []int32
	for _, r := range t.dec.Refusals {
		c := &t.rows[r.Index]
		at := int32(c.d.Attempt - 1) // the row's attempt
		if c.refused == r.By && c.refusedAttempt == at {
			continue
		}
		seqs, names, keys, attempts = append(seqs, c.seq), append(names, r.By.Name), append(keys, r.By.Key), append(attempts, at)
	}
	if len(seqs) > 0 {
		w.Queue(recordRefusalsSQL, seqs, names, keys, attempts)
	}
}

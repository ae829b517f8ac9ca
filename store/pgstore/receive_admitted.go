package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
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
SELECT seq, envelope, body, attempt FROM idem_queue
WHERE visible_at <= now()
  AND ($3 < 2 OR mod(part, $3) = $2)
ORDER BY visible_at, seq
LIMIT $1
FOR UPDATE SKIP LOCKED`

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
// admitWindow × p.Max visible messages (SKIP LOCKED), computes their
// needs, locks their counters in (Name, Key) order, decides, takes the
// holds (expiring with the lease) and leases the admitted messages. A
// release by this process wakes it; a release by another process is
// seen at the next notification or Config.PollInterval.
func (s *Store) ReceiveAdmitted(ctx context.Context, p *store.ReceiveParams) ([]transport.Delivery, error) {
	if p == nil {
		p = &store.ReceiveParams{}
	}
	s.startListener()
	for {
		if err := s.check("receive"); err != nil {
			return nil, err
		}
		s.lmu.Lock()
		wake := s.wake
		s.lmu.Unlock()
		ds, next, err := s.receiveAdmitted(ctx, p)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if cerr := s.check("receive"); cerr != nil {
				return nil, cerr
			}
			return nil, fmt.Errorf("pgstore: receive admitted: %w", err)
		}
		if len(ds) > 0 {
			return ds, nil
		}
		if err := sqlq.Wait(ctx, s.done, wake, next, s.cfg.PollInterval); err != nil {
			if errors.Is(err, transport.ErrClosed) {
				return nil, fmt.Errorf("pgstore: receive admitted: %w", err)
			}
			return nil, err
		}
	}
}

// candidate is a locked queue row an admitting receive decides on.
type candidate struct {
	seq int64
	d   transport.Delivery
}

// receiveAdmitted is one admitting receive: the deliveries, or when none
// the time to look again (zero: at the next wake or poll).
func (s *Store) receiveAdmitted(ctx context.Context, p *store.ReceiveParams) ([]transport.Delivery, time.Time, error) {
	n := max(p.Max, 1)
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, time.Time{}, redact(err)
	}
	defer conn.Release()
	tok := sqlq.HeldPrefix + sqlq.NewToken()
	var rows []candidate
	b := &pgx.Batch{}
	b.Queue(beginSQL)
	b.Queue(candidatesSQL, admitWindow*n, p.Part, p.Parts).Query(func(r pgx.Rows) error {
		for r.Next() {
			var c candidate
			var meta, body []byte
			if err := r.Scan(&c.seq, &meta, &body, &c.d.Attempt); err != nil {
				return err
			}
			env, err := sqlq.DecodeEnvelope(meta, body)
			if err != nil {
				return err
			}
			c.d = transport.Delivery{Envelope: env, Attempt: c.d.Attempt + 1, Token: sqlq.FormatToken(c.seq, tok)}
			rows = append(rows, c)
		}
		return r.Err()
	})
	var out []transport.Delivery
	var dec admit.QueueDecision
	err = s.admitTx(ctx, conn, b, func() (*pgx.Batch, error) {
		var err error
		out, dec, err = s.decideCandidates(ctx, conn, p, rows, n, tok)
		if err != nil {
			return nil, err
		}
		return nil, nil
	})
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

// decideCandidates locks the counters rows need, decides, and sends the
// holds, the leases and COMMIT. It returns the admitted deliveries in
// enqueue order, as Receive does.
func (s *Store) decideCandidates(ctx context.Context, conn *pgxpool.Conn, p *store.ReceiveParams, rows []candidate, n int, tok string) ([]transport.Delivery, admit.QueueDecision, error) {
	cands := make([]admit.Candidate, len(rows))
	reqs := make([]store.AdmitRequest, len(rows))
	for i, r := range rows {
		cands[i] = admit.Candidate{Holder: r.d.Token, PartKey: transport.PartitionKey(&r.d.Envelope)}
		if p.Needs != nil {
			cands[i].Keys = p.Needs(&r.d.Envelope)
		}
		reqs[i] = store.AdmitRequest{Holder: cands[i].Holder, Keys: cands[i].Keys}
	}
	if err := admit.Validate(reqs); err != nil {
		return nil, admit.QueueDecision{}, err
	}
	var cs map[store.LimitKey]*admit.Counter
	now := time.Now()
	if keys := admit.KeysOf(p.Limits, cands); len(keys) > 0 {
		b := &pgx.Batch{}
		queueLock(b, keys, &cs, &now)
		if err := conn.SendBatch(ctx, b).Close(); err != nil {
			return nil, admit.QueueDecision{}, err
		}
	}
	dec := admit.DecideQueue(p.Limits, cands, cs, now, n)
	w := &pgx.Batch{}
	held := make([]store.AdmitRequest, len(dec.Admitted))
	seqs := make([]int64, len(dec.Admitted))
	out := make([]transport.Delivery, len(dec.Admitted))
	for j, i := range dec.Admitted {
		held[j], seqs[j], out[j] = reqs[i], rows[i].seq, rows[i].d
	}
	queueHolds(w, held, dec.Holds, cs, now, s.cfg.Lease)
	if len(seqs) > 0 {
		w.Queue(leaseAdmittedSQL, seqs, tok, s.cfg.Lease.Seconds())
	}
	w.Queue(`COMMIT`)
	if err := conn.SendBatch(ctx, w).Close(); err != nil {
		return nil, admit.QueueDecision{}, err
	}
	slices.SortFunc(out, func(a, b transport.Delivery) int { return cmp.Compare(seqOf(a), seqOf(b)) })
	return out, dec, nil
}

// seqOf is the queue row of a delivery of this store.
func seqOf(d transport.Delivery) int64 {
	seq, _, _ := sqlq.ParseToken(d.Token)
	return seq
}

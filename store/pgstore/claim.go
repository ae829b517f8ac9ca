package pgstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/transport"
)

// claimSQL takes visible messages out of the queue inside the unit of work:
// the rows are deleted, not leased, so the claim writes one row version
// less than Receive's UPDATE and commits with the unit of work. Until the
// commit the row locks hide them from other claimers (SKIP LOCKED); a
// rollback leaves them as they were. The selection is receiveSQL's.
const claimSQL = `
DELETE FROM idem_queue q
WHERE q.seq IN (
  SELECT seq FROM idem_queue
  WHERE visible_at <= now()
    AND ($3 < 2 OR mod(part, $3) = $2)
  ORDER BY visible_at, seq
  LIMIT $1
  FOR UPDATE SKIP LOCKED
)
RETURNING q.seq, q.envelope, q.body, q.attempt + 1`

// claimTimeoutSQL bounds, for the claiming transaction only, how long its
// session may sit idle inside it: a claimer that stops talking (its host
// or network gone, which the server would otherwise notice only through
// TCP keepalives, hours later) loses its session, and the rows come back,
// after Config.Lease, as a lease would. An engine that takes longer than
// that between two statements of a unit of work loses the claim the same
// way: its commit fails and the batch is delivered again.
const claimTimeoutSQL = `SELECT set_config('idle_in_transaction_session_timeout', $1, true)`

// txClaim is what a unit of work claimed: the claim's token and the rows
// not yet consumed. A nil *txClaim is a unit of work that claimed nothing.
type txClaim struct {
	token   string
	pending map[int64]bool // claimed rows not yet passed to Consume
}

// Claim takes up to max visible messages of partition part of parts, in
// the same round trip as BEGIN (see store.ClaimUnitOfWork).
func (u *unitOfWork) Claim(ctx context.Context, n, part, parts int) ([]transport.Delivery, error) {
	if err := u.live("claim"); err != nil {
		return nil, err
	}
	if u.begun {
		return nil, fmt.Errorf("pgstore: claim: the unit of work has begun: claim first")
	}
	n = max(n, 1)
	c := &txClaim{token: "tx" + sqlq.NewToken(), pending: map[int64]bool{}}
	var ds []transport.Delivery
	var seqs []int64
	b := &pgx.Batch{}
	b.Queue(beginSQL)
	u.begun = true
	b.Queue(claimTimeoutSQL, strconv.FormatInt(max(u.s.cfg.Lease.Milliseconds(), 1), 10))
	b.Queue(claimSQL, n, part, parts).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var seq int64
			var meta, body []byte
			var d transport.Delivery
			if err := rows.Scan(&seq, &meta, &body, &d.Attempt); err != nil {
				return err
			}
			env, err := sqlq.DecodeEnvelope(meta, body)
			if err != nil {
				return err
			}
			d.Envelope, d.Token = env, sqlq.FormatToken(seq, c.token)
			ds, seqs = append(ds, d), append(seqs, seq)
		}
		return rows.Err()
	})
	if err := u.conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", translate(err))
	}
	order := make([]int, len(ds))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return int(seqs[a] - seqs[b]) })
	out := make([]transport.Delivery, len(ds))
	for i, j := range order {
		out[i] = ds[j]
		c.pending[seqs[j]] = true
	}
	u.claim = c
	return out, nil
}

// consume removes from ds the deliveries this unit of work claimed (their
// rows are deleted already) and returns the others, to be deleted at
// commit as leased deliveries are.
func (c *txClaim) consume(ds []transport.Delivery) []transport.Delivery {
	if c == nil {
		return ds
	}
	var rest []transport.Delivery
	for _, d := range ds {
		seq, tok, ok := sqlq.ParseToken(d.Token)
		if ok && tok == c.token {
			delete(c.pending, seq)
			continue
		}
		rest = append(rest, d)
	}
	return rest
}

// settled refuses a commit that would drop claimed messages nobody
// consumed.
func (c *txClaim) settled() error {
	if c == nil || len(c.pending) == 0 {
		return nil
	}
	seqs := make([]int64, 0, len(c.pending))
	for s := range c.pending {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	return fmt.Errorf("pgstore: commit: queue rows %v were claimed by this unit of work but not consumed: roll it back to return them", seqs)
}

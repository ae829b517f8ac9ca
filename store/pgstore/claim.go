package pgstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

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
RETURNING q.seq, q.id, q.envelope, q.body, q.attempt + 1, q.part`

// claimSavepoint marks the end of the claim inside the transaction: a
// statement refused later (a conflict, rejected data) is rolled back to
// it, so that the claim survives for Lease.
const claimSavepoint = `SAVEPOINT idem_claim`

// requeueSQL puts claimed rows back in the queue under their own seq, with
// the attempt count the claim gave them (as Receive counts one), visible
// after a delay in seconds each, and token $8.
const requeueSQL = `
INSERT INTO idem_queue (seq, id, envelope, body, visible_at, attempt, token, part)
SELECT u.seq, u.id, u.envelope::jsonb, u.body, clock_timestamp() + make_interval(secs => u.delay), u.attempt, $8, u.part
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::bytea[], $5::float8[], $6::int[], $7::int[])
  AS u(seq, id, envelope, body, delay, attempt, part)`

// claimTimeoutSQL bounds, for the claiming transaction only, how long its
// session may sit idle inside it: a claimer that stops talking (its host
// or network gone, which the server would otherwise notice only through
// TCP keepalives, hours later) loses its session, and the rows come back,
// after Config.Lease, as a lease would. An engine that takes longer than
// that between two statements of a unit of work loses the claim the same
// way: its commit fails and the batch is delivered again.
const claimTimeoutSQL = `SELECT set_config('idle_in_transaction_session_timeout', $1, true)`

// txClaim is what a unit of work claimed: the claim's token, the rows as
// claimed, those not yet consumed or returned, and those returned. A unit
// of work that claimed nothing has none (unitOfWork.claim is nil), and
// every caller checks that before calling a method.
type txClaim struct {
	token   string
	rows    []claimedRow   // in enqueue order
	pending map[int64]bool // claimed rows not yet passed to Consume or Return
	returns map[int64]time.Duration
	// failed is set when the server refused a statement of Commit: the
	// transaction is rolled back to the claim, for Lease or Rollback.
	failed bool
}

// claimedRow is a claimed queue row, kept to put it back.
type claimedRow struct {
	seq      int64
	id       string
	meta     []byte
	body     []byte
	attempt  int
	part     int32
	delivery transport.Delivery
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
	b := &pgx.Batch{}
	b.Queue(beginSQL)
	u.begun = true
	b.Queue(claimTimeoutSQL, strconv.FormatInt(max(u.s.cfg.Lease.Milliseconds(), 1), 10))
	b.Queue(claimSQL, n, part, parts).Query(func(rows pgx.Rows) error {
		for rows.Next() {
			var r claimedRow
			if err := rows.Scan(&r.seq, &r.id, &r.meta, &r.body, &r.attempt, &r.part); err != nil {
				return err
			}
			env, err := sqlq.DecodeEnvelope(r.meta, r.body)
			if err != nil {
				return err
			}
			r.delivery = transport.Delivery{Envelope: env, Token: sqlq.FormatToken(r.seq, c.token), Attempt: r.attempt}
			c.rows = append(c.rows, r)
		}
		return rows.Err()
	})
	b.Queue(claimSavepoint)
	if err := u.conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("pgstore: claim: %w", translate(err))
	}
	slices.SortFunc(c.rows, func(a, b claimedRow) int { return cmp.Compare(a.seq, b.seq) })
	out := make([]transport.Delivery, len(c.rows))
	for i, r := range c.rows {
		out[i] = r.delivery
		c.pending[r.seq] = true
	}
	u.claim = c
	return out, nil
}

// Return puts a claimed delivery back in the queue when the unit of work
// commits, visible after delay, with its Attempt counted (see
// store.ClaimUnitOfWork).
func (u *unitOfWork) Return(_ context.Context, d transport.Delivery, delay time.Duration) error {
	if err := u.live("return"); err != nil {
		return err
	}
	seq, tok, ok := sqlq.ParseToken(d.Token)
	if c := u.claim; c == nil || !ok || tok != c.token || !c.pending[seq] {
		return fmt.Errorf("pgstore: return %s: delivery token %q is not one this unit of work claimed and still holds", d.Envelope.ID, d.Token)
	}
	delete(u.claim.pending, seq)
	if u.claim.returns == nil {
		u.claim.returns = map[int64]time.Duration{}
	}
	u.claim.returns[seq] = max(delay, 0)
	return nil
}

// Lease ends the unit of work keeping only its claim, as a lease (see
// store.ClaimUnitOfWork): back to the savepoint after the claim, the
// claimed rows back in the queue under a new token, invisible for
// Config.Lease, then COMMIT, in one round trip.
func (u *unitOfWork) Lease(ctx context.Context) ([]transport.Delivery, error) {
	if err := u.live("lease"); err != nil {
		return nil, err
	}
	c := u.claim
	if c == nil {
		return nil, fmt.Errorf("pgstore: lease: the unit of work claimed nothing")
	}
	tok := sqlq.NewToken()
	b := &pgx.Batch{}
	b.Queue(`ROLLBACK TO SAVEPOINT idem_claim`)
	delays := map[int64]time.Duration{}
	for _, r := range c.rows {
		delays[r.seq] = u.s.cfg.Lease
	}
	c.queueRequeue(b, delays, tok)
	b.Queue(`COMMIT`)
	err := u.conn.SendBatch(ctx, b).Close()
	u.finish(ctx, err != nil)
	if err != nil {
		return nil, fmt.Errorf("pgstore: lease %d claimed messages: %w", len(c.rows), translate(err))
	}
	out := make([]transport.Delivery, len(c.rows))
	for i, r := range c.rows {
		out[i] = r.delivery
		out[i].Token = sqlq.FormatToken(r.seq, tok)
	}
	return out, nil
}

// queueRequeue queues the re-insertion of the rows in delays, each
// visible after its delay, under token tok.
func (c *txClaim) queueRequeue(b *pgx.Batch, delays map[int64]time.Duration, tok string) {
	if len(delays) == 0 {
		return
	}
	var seqs []int64
	var ids, metas []string
	var bodies [][]byte
	var secs []float64
	var attempts, parts []int32
	for _, r := range c.rows {
		d, ok := delays[r.seq]
		if !ok {
			continue
		}
		seqs, ids, metas, bodies = append(seqs, r.seq), append(ids, r.id), append(metas, string(r.meta)), append(bodies, r.body)
		secs, attempts, parts = append(secs, d.Seconds()), append(attempts, int32(r.attempt)), append(parts, r.part)
	}
	b.Queue(requeueSQL, seqs, ids, metas, bodies, secs, attempts, parts, tok)
}

// keeps reports whether the unit of work stays open after Commit failed
// with err: when it claimed and the server refused a statement, the
// transaction is rolled back to the claim (in the same round trip as
// the failed batch's end) and kept for Lease.
func (c *txClaim) keeps(ctx context.Context, u *unitOfWork, err error) bool {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || ctx.Err() != nil {
		return false
	}
	if _, rerr := u.conn.Exec(ctx, `ROLLBACK TO SAVEPOINT idem_claim`); rerr != nil {
		return false
	}
	c.failed = true
	return true
}

// consume removes from ds the deliveries this unit of work claimed (their
// rows are deleted already) and returns the others, to be deleted at
// commit as leased deliveries are.
func (c *txClaim) consume(ds []transport.Delivery) []transport.Delivery {
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
// consumed or returned, or one after a failed Commit.
func (c *txClaim) settled() error {
	if c.failed {
		return fmt.Errorf("pgstore: commit: a previous Commit failed: Lease or Rollback the unit of work")
	}
	if len(c.pending) == 0 {
		return nil
	}
	seqs := make([]int64, 0, len(c.pending))
	for s := range c.pending {
		seqs = append(seqs, s)
	}
	slices.Sort(seqs)
	return fmt.Errorf("pgstore: commit: queue rows %v were claimed by this unit of work but not consumed: roll it back to return them", seqs)
}

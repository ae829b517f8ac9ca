package pgstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/transport"
)

// Publish enqueues envelopes and notifies idle consumers, in one round trip
// and one implicit transaction.
func (s *Store) Publish(ctx context.Context, msgs []transport.Envelope) error {
	if err := s.check("publish"); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	for i := range msgs {
		if msgs[i].ID == "" || msgs[i].Type == "" {
			return fmt.Errorf("pgstore: publish envelope %d: ID and Type are required", i)
		}
		if err := transport.ValidateEnvelope(&msgs[i]); err != nil {
			// PostgreSQL would refuse it with an SQLSTATE naming no field.
			return fmt.Errorf("pgstore: publish envelope %d: %w", i, err)
		}
	}
	b := &pgx.Batch{}
	if err := queueEnqueue(b, msgs); err != nil {
		return err
	}
	b.Queue(notifySQL, s.cfg.Schema)
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("pgstore: publish %d messages: %w", len(msgs), translate(err))
	}
	return nil
}

const receiveSQL = `
UPDATE idem_queue q
SET attempt = q.attempt + 1, token = $2, visible_at = now() + make_interval(secs => $3)
FROM (
  SELECT seq FROM idem_queue
  WHERE visible_at <= now()
    AND ($5 < 2 OR mod(part, $5) = $4)
  ORDER BY visible_at, seq
  LIMIT $1
  FOR UPDATE SKIP LOCKED
) c
WHERE q.seq = c.seq
RETURNING q.seq, q.envelope, q.body, q.attempt`

// Receive claims up to max visible messages for Config.Lease, waiting for a
// notification, the next lease expiry or Config.PollInterval when there are
// none.
func (s *Store) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	return s.ReceivePartition(ctx, max, 0, 1)
}

// ReceivePartition is Receive restricted to the messages whose partition
// key hashes to part modulo parts: the canonical form of the CorrelationID
// (canon.PartitionKey: NFC, trimmed), or the ID without one, hashed with
// PostgreSQL's hashtext when the message is enqueued.
func (s *Store) ReceivePartition(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	if max < 1 {
		max = 1
	}
	s.startListener()
	for {
		if err := s.check("receive"); err != nil {
			return nil, err
		}
		s.lmu.Lock()
		wake := s.wake
		s.lmu.Unlock()
		ds, next, err := s.claim(ctx, max, part, parts)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			if cerr := s.check("receive"); cerr != nil {
				return nil, cerr
			}
			return nil, err
		}
		if len(ds) > 0 {
			return ds, nil
		}
		if err := sqlq.Wait(ctx, s.done, wake, nextTime(next), s.cfg.PollInterval); err != nil {
			if errors.Is(err, transport.ErrClosed) {
				return nil, fmt.Errorf("pgstore: receive: %w", err)
			}
			return nil, err
		}
	}
}

// nextTime is the zero time when the queue had no next visible message.
func nextTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}

func (s *Store) claim(ctx context.Context, max, part, parts int) ([]transport.Delivery, pgtype.Timestamptz, error) {
	var next pgtype.Timestamptz
	tok := sqlq.NewToken()
	rows, err := s.pool.Query(ctx, receiveSQL, max, tok, s.cfg.Lease.Seconds(), part, parts)
	if err != nil {
		return nil, next, fmt.Errorf("pgstore: receive: %w", translate(err))
	}
	type row struct {
		seq int64
		d   transport.Delivery
	}
	var got []row
	for rows.Next() {
		var r row
		var meta, body []byte
		if err := rows.Scan(&r.seq, &meta, &body, &r.d.Attempt); err != nil {
			rows.Close()
			return nil, next, fmt.Errorf("pgstore: receive: %w", err)
		}
		if r.d.Envelope, err = sqlq.DecodeEnvelope(meta, body); err != nil {
			rows.Close()
			return nil, next, err
		}
		r.d.Token = sqlq.FormatToken(r.seq, tok)
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		return nil, next, fmt.Errorf("pgstore: receive: %w", translate(err))
	}
	if len(got) == 0 {
		// The next message this partition may claim: other partitions'
		// visible rows must not make an idle consumer spin.
		if err := s.pool.QueryRow(ctx, `SELECT min(visible_at) FROM idem_queue WHERE $2 < 2 OR mod(part, $2) = $1`, part, parts).Scan(&next); err != nil {
			return nil, next, fmt.Errorf("pgstore: receive: %w", translate(err))
		}
		return nil, next, nil
	}
	slices.SortFunc(got, func(a, b row) int { return int(a.seq - b.seq) })
	ds := make([]transport.Delivery, len(got))
	for i := range got {
		ds[i] = got[i].d
	}
	return ds, next, nil
}

// Ack deletes settled messages. A delivery whose claim was taken over by
// another consumer is refused with transport.ErrLeaseLost; one already
// deleted is not an error.
func (s *Store) Ack(ctx context.Context, ds []transport.Delivery) error {
	if err := s.check("ack"); err != nil {
		return err
	}
	if len(ds) == 0 {
		return nil
	}
	seqs, toks, err := sqlq.SplitTokens(ds)
	if err != nil {
		return err
	}
	rows, err := s.pool.Query(ctx, `
DELETE FROM idem_queue q USING unnest($1::bigint[], $2::text[]) AS u(seq, token)
WHERE q.seq = u.seq AND q.token = u.token
RETURNING q.seq`, seqs, toks)
	if err != nil {
		return fmt.Errorf("pgstore: ack: %w", translate(err))
	}
	deleted, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("pgstore: ack: %w", translate(err))
	}
	if len(deleted) == len(ds) {
		return nil
	}
	return s.fenced(ctx, "ack", seqs, deleted)
}

// fenced reports ErrLeaseLost for the deliveries among seqs that were not
// settled but still exist (claimed by someone else, or released).
func (s *Store) fenced(ctx context.Context, op string, seqs, settled []int64) error {
	var missing []int64
	for _, q := range seqs {
		if !slices.Contains(settled, q) {
			missing = append(missing, q)
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT seq FROM idem_queue WHERE seq = ANY($1)`, missing)
	if err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, translate(err))
	}
	still, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, translate(err))
	}
	if len(still) == 0 {
		return nil // already settled
	}
	return fmt.Errorf("pgstore: %s of queue rows %v: %w", op, still, transport.ErrLeaseLost)
}

// Nack makes a claimed message visible again after delay. The claim's token
// stays until the message is claimed again, so a repeated Nack (or a late
// Ack) of the same delivery is not an error.
func (s *Store) Nack(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	if err := s.check("nack"); err != nil {
		return err
	}
	seqs, toks, err := sqlq.SplitTokens([]transport.Delivery{d})
	if err != nil {
		return err
	}
	b := &pgx.Batch{}
	var n int64
	b.Queue(`UPDATE idem_queue SET visible_at = now() + make_interval(secs => $3) WHERE seq = $1 AND token = $2`,
		seqs[0], toks[0], delay.Seconds()).Exec(func(ct pgconn.CommandTag) error {
		n = ct.RowsAffected()
		return nil
	})
	if delay <= 0 {
		b.Queue(notifySQL, s.cfg.Schema)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("pgstore: nack: %w", translate(err))
	}
	if n == 1 {
		return nil
	}
	return s.fenced(ctx, "nack", seqs, nil)
}

// startListener starts, once, the goroutine that LISTENs for queue
// notifications and wakes waiting receivers.
func (s *Store) startListener() {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.listenOn || s.closed.Load() {
		return
	}
	s.listenOn = true
	ctx, cancel := context.WithCancel(context.Background())
	s.lcancel = cancel
	s.lwg.Add(1)
	go func() {
		defer s.lwg.Done()
		for ctx.Err() == nil {
			if err := s.listen(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("queue listener lost its connection; polling until it is back", "error", err)
				t := time.NewTimer(time.Second)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
		}
	}()
}

func (s *Store) listen(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `LISTEN idem_queue`); err != nil {
		return err
	}
	// A receiver that found the queue empty before the LISTEN took effect
	// (at start, or while the listener was reconnecting) missed the
	// notifications of that gap: wake every waiting receiver once, to look
	// again, instead of leaving them to the poll.
	s.wakeReceivers()
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `UNLISTEN *`); err != nil {
			conn.Conn().Close(uctx) //nolint:errcheck // the pool drops a closed connection
		}
	}()
	for {
		n, err := conn.Conn().WaitForNotification(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) && ctx.Err() != nil {
				return nil
			}
			return err
		}
		if n.Payload != s.cfg.Schema {
			continue
		}
		s.wakeReceivers()
	}
}

// wakeReceivers wakes every receiver waiting for a notification.
func (s *Store) wakeReceivers() {
	s.lmu.Lock()
	close(s.wake)
	s.wake = make(chan struct{})
	s.lmu.Unlock()
}

// Pending counts the queue's messages: ready ones, visible now, and unacked
// ones, which are not: handed out and still leased, or waiting for a Nack's
// delay to pass.
func (s *Store) Pending(ctx context.Context) (ready, unacked int, err error) {
	if err := s.check("pending"); err != nil {
		return 0, 0, err
	}
	err = s.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE visible_at <= now()), count(*) FILTER (WHERE visible_at > now()) FROM idem_queue`).Scan(&ready, &unacked)
	if err != nil {
		return 0, 0, fmt.Errorf("pgstore: pending: %w", translate(err))
	}
	return ready, unacked, nil
}

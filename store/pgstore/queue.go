package pgstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
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

// receiveTemplate leases up to $1 visible messages of partition $4 of $5
// ({{part}}: receiveSQL, receiveShareSQL) for
// $3 seconds under token $2, in one statement: an idle receiver woken for
// nothing pays one round trip (docs/scaling.md, "Many replicas"). Claimed
// rows come back with a NULL next time; when it claimed none, one row of
// NULLs comes back, with the time the partition's next message becomes
// visible (NULL when the partition is empty).
//
// The next time is read in the claim's snapshot (a data-modifying CTE's
// writes are not visible to the rest of its statement), which matters only
// when nothing was claimed. A message visible in that snapshot was then
// skipped: another consumer holds it locked, its claim in flight, or took
// it since. It is counted as coming back after a lease, as a Receive's
// claim leaves it, and not as visible now: every receiver that lost the
// race to it would claim again at once, and a herd of receivers woken by
// one NOTIFY would pay two statements each.
//
// With $6 set (seconds: ReceiveShare's StealAfter) and parts > 1, a claim
// whose own partition has nothing visible and unlocked takes the others'
// messages visible for $6 or longer (stolen), and the next time also
// counts when the next of those becomes old enough. Without it (NULL),
// the claim never leaves its partition.
const receiveTemplate = `
WITH own AS (
  SELECT seq FROM idem_queue
  WHERE visible_at <= now()
    AND ($5 < 2 OR {{part}})
  ORDER BY visible_at, seq
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), stolen AS (
  SELECT seq FROM idem_queue
  WHERE $5 >= 2 AND $6::float8 IS NOT NULL AND NOT EXISTS (SELECT FROM own)
    AND visible_at <= now() - make_interval(secs => $6)
  ORDER BY visible_at, seq
  LIMIT $1
  FOR UPDATE SKIP LOCKED
), claimed AS (
  UPDATE idem_queue q
  SET attempt = q.attempt + 1, token = $2, visible_at = now() + make_interval(secs => $3)
  FROM (SELECT seq FROM own UNION ALL SELECT seq FROM stolen) c
  WHERE q.seq = c.seq
  RETURNING q.seq, q.envelope, q.body, q.attempt
)
SELECT seq, envelope, body, attempt, NULL::timestamptz FROM claimed
UNION ALL
SELECT NULL, NULL, NULL, NULL, least(
  (SELECT min(visible_at) FROM idem_queue WHERE visible_at > now() AND ($5 < 2 OR {{part}})),
  (SELECT now() + make_interval(secs => $3) FROM idem_queue WHERE visible_at <= now() AND ($5 < 2 OR {{part}}) ORDER BY visible_at LIMIT 1),
  CASE WHEN $5 >= 2 AND $6::float8 IS NOT NULL THEN
    (SELECT min(visible_at) FROM idem_queue WHERE visible_at > now() - make_interval(secs => $6)) + make_interval(secs => $6)
  END)
WHERE NOT EXISTS (SELECT FROM claimed)`

// receiveSQL is receiveTemplate for partition $4 of $5 as PartitionOf
// has it (the remainder of the hash), for ReceivePartition.
var receiveSQL = strings.ReplaceAll(receiveTemplate, "{{part}}", "mod(part, $5) = $4")

// receiveShareSQL is receiveTemplate for share $4 of $5 as ShareOf has
// it (a range of the hash), for ReceiveShare: the planner estimates a
// range from the column's histogram, and reads the queue's index in
// order; it took a remainder for one row in 200 whatever the divisor,
// and a share's claim sorted the whole queue.
var receiveShareSQL = strings.ReplaceAll(receiveTemplate, "{{part}}", "(part >= $4::bigint * 2147483648 / $5 AND part < ($4::bigint + 1) * 2147483648 / $5)")

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
	return s.poller().Receive(ctx, "pgstore: receive", nil, func(ctx context.Context) ([]transport.Delivery, time.Time, error) {
		ds, next, err := s.claim(ctx, max, part, parts, nil)
		return ds, nextTime(next), err
	})
}

// poller is how this store's receives wait (sqlq.Poller): woken by the
// listener's notifications and this process's commits.
func (s *Store) poller() *sqlq.Poller {
	return &sqlq.Poller{Check: s.check, Done: s.done, Every: s.cfg.PollInterval, Wake: func() <-chan struct{} {
		s.lmu.Lock()
		defer s.lmu.Unlock()
		return s.wake
	}}
}

// nextTime is the zero time when the queue had no next visible message.
func nextTime(t pgtype.Timestamptz) time.Time {
	if !t.Valid {
		return time.Time{}
	}
	return t.Time
}

// claim runs receiveSQL once: up to max visible messages of partition part
// of parts; or, when steal is set (seconds), receiveShareSQL: those of
// share part of parts, or when it has none, those of any share visible
// for steal or longer (ReceiveShare).
func (s *Store) claim(ctx context.Context, max, part, parts int, steal *float64) ([]transport.Delivery, pgtype.Timestamptz, error) {
	var next pgtype.Timestamptz
	tok := sqlq.NewToken()
	q := receiveSQL
	if steal != nil {
		q = receiveShareSQL
	}
	rows, err := s.pool.Query(ctx, q, max, tok, s.cfg.Lease.Seconds(), part, parts, steal)
	if err != nil {
		return nil, next, fmt.Errorf("pgstore: receive: %w", translate(err))
	}
	type row struct {
		seq int64
		d   transport.Delivery
	}
	var got []row
	for rows.Next() {
		var seq pgtype.Int8
		var attempt pgtype.Int4
		var meta, body []byte
		if err := rows.Scan(&seq, &meta, &body, &attempt, &next); err != nil {
			rows.Close()
			return nil, next, fmt.Errorf("pgstore: receive: %w", err)
		}
		if !seq.Valid {
			continue // nothing claimed: the row of the next visible time
		}
		r := row{seq: seq.Int64, d: transport.Delivery{Attempt: int(attempt.Int32)}}
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
// another consumer is refused with transport.ErrLeaseLost, and so is an
// admitted delivery (ReceiveAdmitted) whose lease has passed, by the
// database's clock (sqlq.Lost); one already deleted or nacked is not an
// error.
func (s *Store) Ack(ctx context.Context, ds []transport.Delivery) error {
	if err := s.check("ack"); err != nil {
		return err
	}
	release := releaseOf(ds)
	err := s.fencedWrite(ctx, "ack", ds, false, release, `
DELETE FROM idem_queue q USING unnest($1::bigint[], $2::text[]) AS u(seq, token)
WHERE q.seq = u.seq AND q.token = u.token AND (q.visible_at > clock_timestamp() OR q.token NOT LIKE 'held%')
RETURNING q.seq`)
	if release != nil {
		s.notifySoon() // a waiting message may be admitted now, here or elsewhere
	}
	return err
}

// fencedWrite runs q, a statement over the queue rows of ds ($1 their
// seqs and $2 their claim tokens; args follow) that returns the seq of
// each row it wrote, then NOTIFY when notify is set, in one round trip.
// It reports with transport.ErrLeaseLost the rows it missed that were
// handed out again since (see fenced). Ack, Nack and ExtendLeases share
// it. also, when not nil, queues statements of its own after q's (the
// holds of admitted deliveries: see flow.go).
func (s *Store) fencedWrite(ctx context.Context, op string, ds []transport.Delivery, notify bool, also func(*pgx.Batch), q string, args ...any) error {
	if len(ds) == 0 {
		return nil
	}
	seqs, toks, err := sqlq.SplitTokens(ds)
	if err != nil {
		return err
	}
	var done []int64
	b := &pgx.Batch{}
	b.Queue(q, append([]any{seqs, toks}, args...)...).Query(func(rows pgx.Rows) error {
		var err error
		done, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	if also != nil {
		also(b)
	}
	if notify {
		b.Queue(notifySQL, s.cfg.Schema)
	}
	if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, translate(err))
	}
	if len(done) == len(seqs) {
		return nil
	}
	return s.fenced(ctx, op, seqs, toks, done)
}

// fenced reports ErrLeaseLost for the deliveries among seqs (claimed with
// toks) that were not written (done) and that are lost (sqlq.Lost): their
// rows were handed out again since, or they were admitted and their lease
// has passed. A row that is gone was acked; one whose claim a Nack
// retired is settled; a plain one still holding the claim's token was
// locked by a settlement in flight (the lease extension skips locked
// rows).
func (s *Store) fenced(ctx context.Context, op string, seqs []int64, toks []string, done []int64) error {
	held := map[int64]string{}
	for i, q := range seqs {
		if !slices.Contains(done, q) {
			held[q] = toks[i]
		}
	}
	rows, err := s.pool.Query(ctx, `SELECT seq, coalesce(token, ''), visible_at <= clock_timestamp() FROM idem_queue WHERE seq = ANY($1)`, slices.Collect(maps.Keys(held)))
	if err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, translate(err))
	}
	var lost []int64
	var seq int64
	var cur string
	var expired bool
	_, err = pgx.ForEachRow(rows, []any{&seq, &cur, &expired}, func() error {
		if sqlq.Lost(cur, held[seq], expired) {
			lost = append(lost, seq)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("pgstore: %s: %w", op, translate(err))
	}
	if len(lost) == 0 {
		return nil // settled already
	}
	slices.Sort(lost)
	return fmt.Errorf("pgstore: %s of queue rows %v: %w", op, lost, transport.ErrLeaseLost)
}

// Nack makes a claimed message visible again after delay; a lost
// delivery is refused as by Ack. It settles the delivery: the claim's token is retired in the same UPDATE
// (sqlq.RetiredPrefix), so a repeated Nack, a late Ack or a lease
// extension of the same delivery is ignored, and no extension replaces
// the delay.
func (s *Store) Nack(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	if err := s.check("nack"); err != nil {
		return err
	}
	release := releaseOf([]transport.Delivery{d})
	err := s.fencedWrite(ctx, "nack", []transport.Delivery{d}, delay <= 0, release, `
UPDATE idem_queue q SET visible_at = now() + make_interval(secs => $3), token = $4 || q.token
FROM unnest($1::bigint[], $2::text[]) AS u(seq, token)
WHERE q.seq = u.seq AND q.token = u.token AND (q.visible_at > clock_timestamp() OR q.token NOT LIKE 'held%')
RETURNING q.seq`, delay.Seconds(), sqlq.RetiredPrefix)
	if release != nil {
		s.notifySoon() // a waiting message may be admitted now, here or elsewhere
	}
	return err
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
	if s.cfg.viaPooler && s.cfg.DirectURL == "" {
		s.log.Warn("the queue polls every PollInterval: the store connects through a connection pooler in transaction mode, which cannot LISTEN; "+
			"give Config.DirectURL (the URL of PostgreSQL itself) for notifications", "poll_interval", s.cfg.PollInterval)
		return
	}
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

// listenConn is the connection the listener LISTENs on: one of the pool,
// or one of its own to Config.DirectURL when set.
type listenConn interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Conn() *pgx.Conn
}

// directListen is a connection of its own to Config.DirectURL.
type directListen struct{ c *pgx.Conn }

func (d directListen) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return d.c.Exec(ctx, sql, args...)
}

func (d directListen) Conn() *pgx.Conn { return d.c }

// listenConnection returns the listener's connection and what gives it back.
func (s *Store) listenConnection(ctx context.Context) (listenConn, func(), error) {
	if s.cfg.DirectURL != "" {
		conn, err := s.directConn(ctx)
		if err != nil {
			return nil, nil, err
		}
		forget := func() {}
		if s.trips != nil && s.trips.watch != nil {
			// A failover closes it with the pool's sessions (failover.go):
			// on a fenced primary it would wait for notifications for ever.
			forget = s.trips.watch.track(conn)
		}
		return directListen{conn}, func() { forget(); _ = conn.Close(context.WithoutCancel(ctx)) }, nil
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, nil, err
	}
	return conn, conn.Release, nil
}

func (s *Store) listen(ctx context.Context) error {
	conn, release, err := s.listenConnection(ctx)
	if err != nil {
		return err
	}
	defer release()
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

package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/transport"
)

// Publish enqueues envelopes in one transaction and wakes this Store's
// waiting consumers once it is durable.
func (s *Store) Publish(ctx context.Context, msgs []transport.Envelope) error {
	if err := s.check("publish"); err != nil {
		return err
	}
	if len(msgs) == 0 {
		return nil
	}
	type row struct {
		id, meta string
		body     []byte
	}
	rows := make([]row, len(msgs))
	for i, m := range msgs {
		if m.ID == "" || m.Type == "" {
			return fmt.Errorf("sqlitestore: publish envelope %d: ID and Type are required", i)
		}
		if err := transport.ValidateEnvelope(&msgs[i]); err != nil {
			// Refused as pgstore refuses it: the SQL queues behave alike.
			return fmt.Errorf("sqlitestore: publish envelope %d: %w", i, err)
		}
		meta, body, err := sqlq.EncodeEnvelope(m)
		if err != nil {
			return err
		}
		rows[i] = row{m.ID, meta, body}
	}
	now := micros(time.Now())
	err := s.write(ctx, "publish", wakeConsumers, func(w *writer) error {
		for _, r := range rows {
			if _, err := w.exec(enqueueSQL, r.id, r.meta, r.body, now); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: publish %d messages: %w", len(msgs), err)
	}
	return nil
}

// receiveSQL claims the messages that became visible first (Receive hands
// them out by seq, publication order). Ordering by the index idem_queue_visible
// reads only the rows it claims, however long the queue; ordering by seq
// alone would sort every visible row, or step over every leased or delayed
// one, at each claim.
const receiveSQL = `
UPDATE idem_queue SET attempt = attempt + 1, token = ?2, visible_at = ?3
WHERE seq IN (
  SELECT seq FROM idem_queue
  WHERE visible_at <= ?1
  ORDER BY visible_at, seq
  LIMIT ?4
)
RETURNING seq, id, envelope, body, attempt`

// Receive claims up to max visible messages for Config.Lease. When there
// are none it waits for a publish through this Store, the next message to
// become visible (a lease or a Nack delay ending), or Config.PollInterval,
// whichever comes first, and looks again.
func (s *Store) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	if max < 1 {
		max = 1
	}
	return s.poller().Receive(ctx, "sqlitestore: receive", nil, func(ctx context.Context) ([]transport.Delivery, time.Time, error) {
		return s.claim(ctx, max)
	})
}

// poller is how this store's receives wait (sqlq.Poller).
func (s *Store) poller() *sqlq.Poller {
	return &sqlq.Poller{Check: s.check, Wake: func() <-chan struct{} { return s.wakeChan() }, Done: s.done, Every: s.cfg.PollInterval}
}

// claim looks, on a reader, for the earliest visible time in the queue and
// takes the write lock only when a message is visible now. It returns the
// claimed deliveries, or when none the time the next message becomes
// visible (zero when the queue is empty).
func (s *Store) claim(ctx context.Context, max int) ([]transport.Delivery, time.Time, error) {
	var next sql.NullInt64
	if err := s.rdb.QueryRowContext(ctx, `SELECT min(visible_at) FROM idem_queue`).Scan(&next); err != nil {
		return nil, time.Time{}, fmt.Errorf("sqlitestore: receive: %w", err)
	}
	if !next.Valid {
		return nil, time.Time{}, nil
	}
	if nextAt := fromMicros(next.Int64); nextAt.After(time.Now()) {
		return nil, nextAt, nil
	}
	type row struct {
		seq     int64
		attempt int
		id      string
		meta    string
		body    []byte
	}
	var got []row
	tok := sqlq.NewToken()
	err := s.write(ctx, "receive", leaseOnly, func(w *writer) error {
		got = got[:0]
		now := time.Now()
		rows, err := w.query(receiveSQL, micros(now), tok, micros(now.Add(s.cfg.Lease)), max)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.seq, &r.id, &r.meta, &r.body, &r.attempt); err != nil {
				return err
			}
			got = append(got, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("sqlitestore: receive: %w", err)
	}
	if len(got) == 0 {
		// Another consumer took them first: look again at once.
		return nil, time.Now(), nil
	}
	slices.SortFunc(got, func(a, b row) int { return cmp.Compare(a.seq, b.seq) })
	ds := make([]transport.Delivery, len(got))
	for i, r := range got {
		env, err := sqlq.DecodeEnvelope([]byte(r.meta), r.body)
		if err != nil {
			// Hand it out anyway, with what is known: the engine
			// dead-letters an envelope without a type instead of the
			// queue failing every Receive on it.
			s.log.WarnContext(ctx, "queue row holds an undecodable envelope; delivering it without its metadata", "message_id", r.id, "queue_seq", r.seq, "error", err)
			env = transport.Envelope{ID: r.id, Body: r.body}
		}
		ds[i] = transport.Delivery{Envelope: env, Attempt: r.attempt, Token: sqlq.FormatToken(r.seq, tok)}
	}
	return ds, time.Time{}, nil
}

// Ack deletes settled messages. A delivery whose message was claimed again
// by another consumer is refused with transport.ErrLeaseLost and left
// alone, and so is an admitted delivery (ReceiveAdmitted) whose lease has
// passed (sqlq.Lost); one already deleted or nacked is not an error. The others are
// settled.
func (s *Store) Ack(ctx context.Context, ds []transport.Delivery) error {
	if err := s.check("ack"); err != nil {
		return err
	}
	hs, opts := heldOf(ds)
	return s.fencedWrite(ctx, "ack", opts, fenceHooks{before: releasing(hs)}, ds, consumeSQL)
}

// fencedWrite runs q, a statement over one queue row whose arguments are
// ?1 its seq, ?2 the claim's token, ?3 the time (clockNow), then args,
// for each delivery of ds, in one write (none for no deliveries). It reports with transport.ErrLeaseLost each delivery whose
// row q missed because it was handed out again since (see lost); the
// others are written whatever happens to one. Ack, Nack and ExtendLeases
// share it; h runs beside q, in the same write (the holds of admitted
// deliveries: see flow.go).
func (s *Store) fencedWrite(ctx context.Context, op string, opts writeOpts, h fenceHooks, ds []transport.Delivery, q string, args ...any) error {
	if len(ds) == 0 {
		return nil
	}
	seqs, toks, err := sqlq.SplitTokens(ds)
	if err != nil {
		return err
	}
	var lost []error
	err = s.write(ctx, op, opts, func(w *writer) error {
		lost = lost[:0]
		if h.before != nil {
			if err := h.before(w); err != nil {
				return err
			}
		}
		for i := range seqs {
			n, err := w.exec(q, append([]any{seqs[i], toks[i], clockNow{}}, args...)...)
			if err != nil {
				return err
			}
			if n == 1 {
				if h.written != nil {
					if err := h.written(w, ds[i]); err != nil {
						return err
					}
				}
				continue
			}
			taken, err := w.lost(seqs[i], toks[i])
			if err != nil {
				return err
			}
			if taken {
				lost = append(lost, fmt.Errorf("sqlitestore: %s %s (queue row %d): %w", op, ds[i].Envelope.ID, seqs[i], transport.ErrLeaseLost))
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: %s: %w", op, err)
	}
	return errors.Join(lost...)
}

// fenceHooks are what fencedWrite runs beside its statement: before,
// when not nil, first (the release of the holds of admitted deliveries,
// whether their rows are written or lost); written, when not nil, for
// each delivery whose row the statement wrote (the extension of its
// holds: a lost delivery's are left to expire).
type fenceHooks struct {
	before  func(*writer) error
	written func(*writer, transport.Delivery) error
}

const tokenSQL = `SELECT coalesce(token, ''), visible_at <= ?2 FROM idem_queue WHERE seq = ?1`

// lost reports whether the caller's claim of the queue row seq, which it
// failed to write with its claim token tok, is lost (sqlq.Lost): handed
// out again since, or held and past its lease. A missing row was acked
// already, and one whose token a Nack retired is settled.
func (w *writer) lost(seq int64, tok string) (bool, error) {
	rows, err := w.query(tokenSQL, seq, clockNow{})
	if err != nil {
		return false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return false, rows.Err()
	}
	var cur string
	var expired bool
	if err := rows.Scan(&cur, &expired); err != nil {
		return false, err
	}
	return sqlq.Lost(cur, tok, expired), nil
}

// clockNow is an argument that is the time, in the queue's microseconds,
// when its statement runs: a write that waited for the writer judges
// leases at the time it writes, not the time it was asked for.
type clockNow struct{}

// Value implements driver.Valuer.
func (clockNow) Value() (driver.Value, error) { return micros(time.Now()), nil }

// nackSQL makes the row ?1 claimed with token ?2 visible at ?4 and
// retires the token (prefix ?5), unless the claim is lost at ?3 (see
// consumeSQL).
const nackSQL = `UPDATE idem_queue SET visible_at = ?4, token = ?5 || token WHERE seq = ?1 AND token = ?2 AND (visible_at > ?3 OR substr(token, 1, 4) <> 'held')`

// Nack makes a claimed message visible again after delay; a lost
// delivery is refused as by Ack. It settles the
// delivery: the claim's token is retired in the same UPDATE
// (sqlq.RetiredPrefix), so a repeated Nack, a late Ack or a lease
// extension of the same delivery is ignored, and no extension replaces
// the delay.
func (s *Store) Nack(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	if err := s.check("nack"); err != nil {
		return err
	}
	at := micros(time.Now().Add(max(delay, 0)))
	hs, _ := heldOf([]transport.Delivery{d})
	return s.fencedWrite(ctx, "nack", wakeConsumers, fenceHooks{before: releasing(hs)}, []transport.Delivery{d}, nackSQL, at, sqlq.RetiredPrefix)
}

// Pending counts the queue's messages: ready ones, visible now, and unacked
// ones, which are not: handed out and still leased, or waiting for a Nack's
// delay to pass. It reads the committed state and never waits for the
// writer.
func (s *Store) Pending(ctx context.Context) (ready, unacked int, err error) {
	if err := s.check("pending"); err != nil {
		return 0, 0, err
	}
	err = s.rdb.QueryRowContext(ctx, `SELECT coalesce(sum(visible_at <= ?1), 0), coalesce(sum(visible_at > ?1), 0) FROM idem_queue`,
		micros(time.Now())).Scan(&ready, &unacked)
	if err != nil {
		return 0, 0, fmt.Errorf("sqlitestore: pending: %w", err)
	}
	return ready, unacked, nil
}

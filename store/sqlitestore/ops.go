package sqlitestore

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
)

// claimOutboxSQL and claimTimersSQL measure leases on the host's clock,
// which is the database's: every process that opens the file runs on the
// one host (SQLite's locks do not reach across machines), so replicas
// agree on it whatever clock their engines were given. What is due, and
// CreatedBefore, stay on the engine's clock (ClaimParams.Now).
const claimOutboxSQL = `
UPDATE idem_outbox SET lease_until = ?2
WHERE seq IN (
  SELECT seq FROM idem_outbox
  WHERE sent_at IS NULL AND created_at < ?3 AND (lease_until IS NULL OR lease_until <= ?1)
  ORDER BY created_at, seq
  LIMIT ?4
)
RETURNING envelope, body, created_at, seq`

const anyOutboxSQL = `
SELECT EXISTS (
  SELECT 1 FROM idem_outbox
  WHERE sent_at IS NULL AND created_at < ?2 AND (lease_until IS NULL OR lease_until <= ?1)
)`

// ClaimOutbox claims unsent outbox rows created before p.CreatedBefore for
// p.Lease, measured on the host's clock.
func (s *Store) ClaimOutbox(ctx context.Context, p *store.ClaimParams) ([]store.OutboxMessage, error) {
	if p == nil {
		p = &store.ClaimParams{}
	}
	if err := s.check("claim outbox"); err != nil {
		return nil, err
	}
	// Look on a reader first: an idle relay then never takes the write lock.
	now := time.Now()
	var any bool
	if err := s.rdb.QueryRowContext(ctx, anyOutboxSQL, micros(now), micros(p.CreatedBefore)).Scan(&any); err != nil {
		return nil, fmt.Errorf("sqlitestore: claim outbox: %w", err)
	}
	if !any {
		return nil, nil
	}
	type row struct {
		seq, created int64
		meta         string
		body         []byte
	}
	var out []row
	err := s.write(ctx, "claim outbox", leaseOnly, func(w *writer) error {
		out = out[:0]
		now := time.Now()
		rows, err := w.query(claimOutboxSQL, micros(now), micros(now.Add(p.Lease)), micros(p.CreatedBefore), sqlq.Limit(p.Limit))
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.meta, &r.body, &r.created, &r.seq); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: claim outbox: %w", err)
	}
	slices.SortFunc(out, func(a, b row) int {
		return cmp.Or(cmp.Compare(a.created, b.created), cmp.Compare(a.seq, b.seq))
	})
	msgs := make([]store.OutboxMessage, len(out))
	for i, r := range out {
		env, err := sqlq.DecodeEnvelope([]byte(r.meta), r.body)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: claim outbox: %w", err)
		}
		msgs[i] = store.OutboxMessage{Envelope: env, CreatedAt: fromMicros(r.created)}
	}
	return msgs, nil
}

const markSentSQL = `UPDATE idem_outbox SET sent_at = ?2, lease_until = NULL WHERE id = ?1 AND sent_at IS NULL`

// MarkSent records that the transport accepted these outbox messages.
// Unknown and already sent IDs are ignored.
func (s *Store) MarkSent(ctx context.Context, ids []string, at time.Time) error {
	if err := s.check("mark sent"); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	err := s.write(ctx, "mark sent", 0, func(w *writer) error {
		for _, id := range ids {
			if _, err := w.exec(markSentSQL, id, micros(at)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: mark %d sent: %w", len(ids), err)
	}
	return nil
}

const timerCols = `saga_type, key, name, due_at, envelope, body`

const claimTimersSQL = `
UPDATE idem_timers SET lease_until = ?2
WHERE (saga_type, key, name) IN (
  SELECT saga_type, key, name FROM idem_timers
  WHERE due_at <= ?1 AND (lease_until IS NULL OR lease_until <= ?4)
  ORDER BY due_at
  LIMIT ?3
)
RETURNING ` + timerCols

const anyTimerSQL = `
SELECT EXISTS (
  SELECT 1 FROM idem_timers WHERE due_at <= ?1 AND (lease_until IS NULL OR lease_until <= ?2)
)`

// ClaimTimers claims timers due at or before p.Now, by due time, for
// p.Lease, measured on the host's clock.
func (s *Store) ClaimTimers(ctx context.Context, p *store.ClaimParams) ([]store.Timer, error) {
	if p == nil {
		p = &store.ClaimParams{}
	}
	if err := s.check("claim timers"); err != nil {
		return nil, err
	}
	// Look on a reader first: an idle timer poller then never takes the
	// write lock.
	var any bool
	if err := s.rdb.QueryRowContext(ctx, anyTimerSQL, micros(p.Now), micros(time.Now())).Scan(&any); err != nil {
		return nil, fmt.Errorf("sqlitestore: claim timers: %w", err)
	}
	if !any {
		return nil, nil
	}
	var raw []rawTimer
	err := s.write(ctx, "claim timers", leaseOnly, func(w *writer) error {
		now := time.Now()
		rows, err := w.query(claimTimersSQL, micros(p.Now), micros(now.Add(p.Lease)), sqlq.Limit(p.Limit), micros(now))
		if err != nil {
			return err
		}
		raw, err = scanRawTimers(rows)
		return err
	})
	if err == nil {
		var ts []store.Timer
		if ts, err = decodeTimers(raw); err == nil {
			slices.SortFunc(ts, sqlq.CompareTimers)
			return ts, nil
		}
	}
	return nil, fmt.Errorf("sqlitestore: claim timers: %w", err)
}

// rawTimer is a timer row as read, its envelope not yet decoded (which the
// writer leaves to the caller).
type rawTimer struct {
	t    store.Timer
	due  int64
	meta string
	body []byte
}

func scanRawTimers(rows *sql.Rows) ([]rawTimer, error) {
	defer rows.Close()
	var out []rawTimer
	for rows.Next() {
		var r rawTimer
		if err := rows.Scan(&r.t.SagaType, &r.t.Key, &r.t.Name, &r.due, &r.meta, &r.body); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

func decodeTimers(raw []rawTimer) ([]store.Timer, error) {
	ts := make([]store.Timer, len(raw))
	for i, r := range raw {
		env, err := sqlq.DecodeEnvelope([]byte(r.meta), r.body)
		if err != nil {
			return nil, err
		}
		ts[i] = r.t
		ts[i].Envelope, ts[i].DueAt = env, fromMicros(r.due)
	}
	return ts, nil
}

const deleteTimerSQL = `DELETE FROM idem_timers WHERE saga_type = ?1 AND key = ?2 AND name = ?3 AND envelope_id = ?4`

// DeleteTimers removes fired timers whose envelope is still the one fired.
func (s *Store) DeleteTimers(ctx context.Context, ts []store.Timer) error {
	if err := s.check("delete timers"); err != nil {
		return err
	}
	if len(ts) == 0 {
		return nil
	}
	err := s.write(ctx, "delete timers", 0, func(w *writer) error {
		for _, t := range ts {
			if _, err := w.exec(deleteTimerSQL, t.SagaType, t.Key, t.Name, t.Envelope.ID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: delete %d timers: %w", len(ts), err)
	}
	return nil
}

// doomedSQL selects the finished instances one sweep deletes. Every
// statement of the sweep evaluates it inside one write transaction, with
// the instances deleted last, so all see the same rows.
const doomedSQL = `
SELECT saga_type, key FROM idem_instances
WHERE finished_at IS NOT NULL AND finished_at < ?1
ORDER BY finished_at, saga_type, key
LIMIT ?2`

var sweepInstancesSQL = []string{
	`DELETE FROM idem_inbox WHERE (saga_type, key) IN (` + doomedSQL + `)`,
	`DELETE FROM idem_timers WHERE (saga_type, key) IN (` + doomedSQL + `)`,
	`UPDATE idem_journal_guard SET sweeping = 1 WHERE id = 1`,
	`DELETE FROM idem_journal WHERE (saga_type, key) IN (` + doomedSQL + `)`,
	`UPDATE idem_journal_guard SET sweeping = 0 WHERE id = 1`,
	`DELETE FROM idem_instances WHERE (saga_type, key) IN (` + doomedSQL + `)`,
}

const sweepInboxSQL = `
DELETE FROM idem_inbox WHERE (saga_type, key, message_id) IN (
  SELECT i.saga_type, i.key, i.message_id FROM idem_inbox i
  WHERE i.processed_at < ?1
    AND NOT EXISTS (SELECT 1 FROM idem_instances x WHERE x.saga_type = i.saga_type AND x.key = i.key)
  ORDER BY i.processed_at
  LIMIT ?2
)`

const sweepOutboxSQL = `
DELETE FROM idem_outbox WHERE seq IN (
  SELECT seq FROM idem_outbox WHERE sent_at IS NOT NULL AND sent_at < ?1 ORDER BY sent_at LIMIT ?2
)`

// Sweep deletes finished instances (with inbox, timers and journal),
// orphan inbox records and sent outbox rows past retention, each bounded by
// p.Limit and oldest first, in one transaction. Only this path may delete
// journal rows: it lifts the journal's guard inside its transaction.
func (s *Store) Sweep(ctx context.Context, p *store.SweepParams) (*store.SweepResult, error) {
	if p == nil {
		p = &store.SweepParams{}
	}
	res := &store.SweepResult{}
	n := sqlq.Limit(p.Limit)
	err := s.write(ctx, "sweep", 0, func(w *writer) error {
		*res = store.SweepResult{}
		if !p.FinishedBefore.IsZero() {
			for _, q := range sweepInstancesSQL {
				var args []any
				if strings.Contains(q, "?1") {
					args = []any{micros(p.FinishedBefore), n}
				}
				k, err := w.exec(q, args...)
				if err != nil {
					return err
				}
				res.Instances = int(k) // the last statement's count
			}
		}
		if !p.InboxBefore.IsZero() {
			k, err := w.exec(sweepInboxSQL, micros(p.InboxBefore), n)
			if err != nil {
				return err
			}
			res.Inbox = int(k)
		}
		if !p.SentBefore.IsZero() {
			k, err := w.exec(sweepOutboxSQL, micros(p.SentBefore), n)
			if err != nil {
				return err
			}
			res.Outbox = int(k)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: sweep: %w", err)
	}
	return res, nil
}

// The listing queries start at their cursor in the primary key (or the
// due-time index) and read only the page: a lower bound that includes the
// cursor (the smallest key when there is none) and the cursor itself
// excluded.
const listInstancesSQL = `
SELECT ` + instanceCols + ` FROM idem_instances
WHERE (saga_type, key) >= (?1, ?2) AND NOT (?3 AND saga_type = ?1 AND key = ?2)
  AND (?4 = '' OR state = ?4)
ORDER BY saga_type, key
LIMIT ?5`

const listInstancesOfTypeSQL = `
SELECT ` + instanceCols + ` FROM idem_instances
WHERE saga_type = ?1 AND key >= ?2 AND NOT (?3 AND key = ?2)
  AND (?4 = '' OR state = ?4)
ORDER BY key
LIMIT ?5`

// ListInstances pages through instances by (saga type, key); see the
// package documentation for the cursor.
func (s *Store) ListInstances(ctx context.Context, p *store.ListParams) ([]*store.Instance, error) {
	if err := s.check("list instances"); err != nil {
		return nil, err
	}
	if p == nil {
		p = &store.ListParams{}
	}
	afterType, afterKey, err := sqlq.InstanceCursor(p)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list instances: %w", err)
	}
	q, args := listInstancesSQL, []any{afterType, afterKey, p.After != ""}
	if p.SagaType != "" {
		from, exclude := "", false
		switch {
		case p.After == "" || afterType < p.SagaType:
		case afterType == p.SagaType:
			from, exclude = afterKey, true
		default:
			return nil, nil // the cursor is past every instance of the type
		}
		q, args = listInstancesOfTypeSQL, []any{p.SagaType, from, exclude}
	}
	rows, err := s.rdb.QueryContext(ctx, q, append(args, p.State, sqlq.Limit(p.Limit))...)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list instances: %w", err)
	}
	defer rows.Close()
	var out []*store.Instance
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: list instances: %w", err)
		}
		out = append(out, in)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: list instances: %w", err)
	}
	return out, nil
}

const journalSQL = `
SELECT saga_type, key, raw_key, message_id, event_type, from_state, to_state, version, at, payload, diff, detail, state
FROM idem_journal WHERE saga_type = ?1 AND key = ?2 ORDER BY id`

// Journal returns the journal of one instance in commit order.
func (s *Store) Journal(ctx context.Context, k store.Key) ([]store.JournalEntry, error) {
	if err := s.check("journal"); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, journalSQL, k.SagaType, k.Key)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: journal %s/%s: %w", k.SagaType, k.Key, err)
	}
	defer rows.Close()
	var out []store.JournalEntry
	for rows.Next() {
		var j store.JournalEntry
		var at int64
		var d detailCols
		if err := rows.Scan(&j.SagaType, &j.Key, &j.RawKey, &j.MessageID, &j.EventType, &j.FromState, &j.ToState, &j.Version, &at, &d.payload, &d.diff, &d.detail, &d.state); err != nil {
			return nil, fmt.Errorf("sqlitestore: journal %s/%s: %w", k.SagaType, k.Key, err)
		}
		j.At = fromMicros(at)
		if err := d.decode(&j); err != nil {
			return nil, fmt.Errorf("sqlitestore: journal %s/%s: %w", k.SagaType, k.Key, err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlitestore: journal %s/%s: %w", k.SagaType, k.Key, err)
	}
	return out, nil
}

const listTimersSQL = `
SELECT ` + timerCols + ` FROM idem_timers
WHERE due_at >= ?1 AND (due_at, saga_type, key, name) >= (?1, ?2, ?3, ?4)
  AND NOT (?5 AND due_at = ?1 AND saga_type = ?2 AND key = ?3 AND name = ?4)
  AND (?6 = '' OR saga_type = ?6)
ORDER BY due_at, saga_type, key, name
LIMIT ?7`

// ListTimers pages through timers by (due time, saga type, key, name); see
// the package documentation for the cursor.
func (s *Store) ListTimers(ctx context.Context, p *store.ListParams) ([]store.Timer, error) {
	if err := s.check("list timers"); err != nil {
		return nil, err
	}
	if p == nil {
		p = &store.ListParams{}
	}
	due := int64(math.MinInt64)
	var at, ak, an string
	if p.After != "" {
		t, typ, key, name, err := sqlq.TimerCursor(p.After)
		if err != nil {
			return nil, fmt.Errorf("sqlitestore: list timers: %w", err)
		}
		due, at, ak, an = micros(t), typ, key, name
	}
	rows, err := s.rdb.QueryContext(ctx, listTimersSQL, due, at, ak, an, p.After != "", p.SagaType, sqlq.Limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list timers: %w", err)
	}
	raw, err := scanRawTimers(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list timers: %w", err)
	}
	ts, err := decodeTimers(raw)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list timers: %w", err)
	}
	return ts, nil
}

// OutboxBacklog counts unsent outbox rows and the creation time of the
// oldest.
func (s *Store) OutboxBacklog(ctx context.Context) (int, time.Time, error) {
	if err := s.check("outbox backlog"); err != nil {
		return 0, time.Time{}, err
	}
	var n int
	var oldest sql.NullInt64
	err := s.rdb.QueryRowContext(ctx, `SELECT count(*), min(created_at) FROM idem_outbox WHERE sent_at IS NULL`).Scan(&n, &oldest)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("sqlitestore: outbox backlog: %w", err)
	}
	return n, fromNullMicros(oldest), nil
}

const deadLetterCols = `id, envelope, body, reason, error, saga_type, key, attempts, first_failed_at, last_failed_at, first_reason, first_error,
  fingerprint, archived_at`

func scanDeadLetter(row scanner) (*store.DeadLetter, error) {
	var d store.DeadLetter
	var meta string
	var body []byte
	var first, last int64
	var archived sql.NullInt64
	if err := row.Scan(&d.ID, &meta, &body, &d.Reason, &d.Error, &d.SagaType, &d.Key, &d.Attempts, &first, &last, &d.FirstReason, &d.FirstError,
		&d.Fingerprint, &archived); err != nil {
		return nil, err
	}
	env, err := sqlq.DecodeEnvelope([]byte(meta), body)
	if err != nil {
		return nil, err
	}
	d.Envelope, d.FirstFailedAt, d.LastFailedAt, d.ArchivedAt = env, fromMicros(first), fromMicros(last), fromNullMicros(archived)
	return &d, nil
}

const listDeadLettersSQL = `
SELECT ` + deadLetterCols + ` FROM idem_dead_letters
WHERE id >= ?2 AND NOT (?3 AND id = ?2) AND (?1 = '' OR saga_type = ?1)
ORDER BY id
LIMIT ?4`

// ListDeadLetters pages through dead letters by ID; the cursor is the last
// ID of the previous page.
func (s *Store) ListDeadLetters(ctx context.Context, p *store.ListParams) ([]store.DeadLetter, error) {
	if err := s.check("list dead letters"); err != nil {
		return nil, err
	}
	if p == nil {
		p = &store.ListParams{}
	}
	rows, err := s.rdb.QueryContext(ctx, listDeadLettersSQL, p.SagaType, p.After, p.After != "", sqlq.Limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list dead letters: %w", err)
	}
	out, err := collectDeadLetters(rows, "list dead letters")
	if err != nil {
		return nil, err
	}
	return out, s.withReplays(ctx, s.rdb, out)
}

// GetDeadLetter returns one dead letter or an error wrapping
// store.ErrNotFound.
func (s *Store) GetDeadLetter(ctx context.Context, id string) (*store.DeadLetter, error) {
	if err := s.check("get dead letter"); err != nil {
		return nil, err
	}
	d, err := scanDeadLetter(s.rdb.QueryRowContext(ctx, `SELECT `+deadLetterCols+` FROM idem_dead_letters WHERE id = ?1`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("sqlitestore: dead letter %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: dead letter %s: %w", id, err)
	}
	ds := []store.DeadLetter{*d}
	if err := s.withReplays(ctx, s.rdb, ds); err != nil {
		return nil, err
	}
	return &ds[0], nil
}

// DeleteDeadLetters removes dead letters by ID and returns how many.
func (s *Store) DeleteDeadLetters(ctx context.Context, ids []string) (int, error) {
	if err := s.check("delete dead letters"); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, nil
	}
	var n int
	err := s.write(ctx, "delete dead letters", 0, func(w *writer) error {
		n = 0
		for _, id := range ids {
			k, err := w.exec(`DELETE FROM idem_dead_letters WHERE id = ?1`, id)
			if err != nil {
				return err
			}
			n += int(k)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sqlitestore: delete %d dead letters: %w", len(ids), err)
	}
	return n, nil
}

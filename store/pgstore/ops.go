package pgstore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
)

// claimOutboxSQL and claimTimersSQL measure leases on the database's
// clock (now()), the one clock every replica shares: a replica whose own
// clock runs ahead would otherwise take back claims that another still
// holds. What is due, and CreatedBefore, stay on the engine's clock
// (ClaimParams.Now), which wrote the due times and creation times.
const claimOutboxSQL = `
UPDATE idem_outbox o SET lease_until = now() + make_interval(secs => $1)
FROM (
  SELECT id FROM idem_outbox
  WHERE sent_at IS NULL AND created_at < $2 AND (lease_until IS NULL OR lease_until <= now())
  ORDER BY created_at, seq
  LIMIT $3
  FOR UPDATE SKIP LOCKED
) c
WHERE o.id = c.id
RETURNING o.envelope, o.body, o.created_at, o.seq`

// ClaimOutbox claims unsent outbox rows older than p.CreatedBefore for
// p.Lease, measured on the database's clock.
func (s *Store) ClaimOutbox(ctx context.Context, p *store.ClaimParams) ([]store.OutboxMessage, error) {
	if err := s.check("claim outbox"); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, claimOutboxSQL, p.Lease.Seconds(), p.CreatedBefore, sqlq.Limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim outbox: %w", translate(err))
	}
	type row struct {
		m   store.OutboxMessage
		seq int64
	}
	var out []row
	for rows.Next() {
		var meta, body []byte
		var r row
		if err := rows.Scan(&meta, &body, &r.m.CreatedAt, &r.seq); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgstore: claim outbox: %w", err)
		}
		if r.m.Envelope, err = sqlq.DecodeEnvelope(meta, body); err != nil {
			rows.Close()
			return nil, err
		}
		r.m.CreatedAt = r.m.CreatedAt.UTC()
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: claim outbox: %w", translate(err))
	}
	slices.SortFunc(out, func(a, b row) int {
		if c := a.m.CreatedAt.Compare(b.m.CreatedAt); c != 0 {
			return c
		}
		return int(a.seq - b.seq)
	})
	msgs := make([]store.OutboxMessage, len(out))
	for i := range out {
		msgs[i] = out[i].m
	}
	return msgs, nil
}

// MarkSent records that the transport accepted these outbox messages.
func (s *Store) MarkSent(ctx context.Context, ids []string, at time.Time) error {
	if err := s.check("mark sent"); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := s.pool.Exec(ctx, `UPDATE idem_outbox SET sent_at = $2, lease_until = NULL WHERE id = ANY($1) AND sent_at IS NULL`, ids, at); err != nil {
		return fmt.Errorf("pgstore: mark %d sent: %w", len(ids), translate(err))
	}
	return nil
}

const claimTimersSQL = `
UPDATE idem_timers t SET lease_until = now() + make_interval(secs => $2)
FROM (
  SELECT saga_type, key, name FROM idem_timers
  WHERE due_at <= $1 AND (lease_until IS NULL OR lease_until <= now())
  ORDER BY due_at
  LIMIT $3
  FOR UPDATE SKIP LOCKED
) c
WHERE t.saga_type = c.saga_type AND t.key = c.key AND t.name = c.name
RETURNING t.saga_type, t.key, t.name, t.due_at, t.envelope, t.body`

// ClaimTimers claims timers due at p.Now for p.Lease, measured on the
// database's clock.
func (s *Store) ClaimTimers(ctx context.Context, p *store.ClaimParams) ([]store.Timer, error) {
	if err := s.check("claim timers"); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, claimTimersSQL, p.Now, p.Lease.Seconds(), sqlq.Limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim timers: %w", translate(err))
	}
	ts, err := scanTimers(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: claim timers: %w", err)
	}
	slices.SortFunc(ts, sqlq.CompareTimers)
	return ts, nil
}

func scanTimers(rows pgx.Rows) ([]store.Timer, error) {
	defer rows.Close()
	var ts []store.Timer
	for rows.Next() {
		var t store.Timer
		var meta, body []byte
		if err := rows.Scan(&t.SagaType, &t.Key, &t.Name, &t.DueAt, &meta, &body); err != nil {
			return nil, err
		}
		env, err := sqlq.DecodeEnvelope(meta, body)
		if err != nil {
			return nil, err
		}
		t.Envelope, t.DueAt = env, t.DueAt.UTC()
		ts = append(ts, t)
	}
	return ts, translate(rows.Err())
}

// DeleteTimers removes fired timers whose envelope is still the one fired.
func (s *Store) DeleteTimers(ctx context.Context, ts []store.Timer) error {
	if err := s.check("delete timers"); err != nil {
		return err
	}
	if len(ts) == 0 {
		return nil
	}
	n := len(ts)
	a, b, c, ids := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, t := range ts {
		a[i], b[i], c[i], ids[i] = t.SagaType, t.Key, t.Name, t.Envelope.ID
	}
	_, err := s.pool.Exec(ctx, `
DELETE FROM idem_timers t
USING unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS u(saga_type, key, name, id)
WHERE t.saga_type = u.saga_type AND t.key = u.key AND t.name = u.name AND t.envelope->>'id' = u.id`, a, b, c, ids)
	if err != nil {
		return fmt.Errorf("pgstore: delete %d timers: %w", n, translate(err))
	}
	return nil
}

const sweepInstancesSQL = `
WITH doomed AS (
  SELECT saga_type, key FROM idem_instances
  WHERE finished_at IS NOT NULL AND finished_at < $1
  ORDER BY finished_at
  LIMIT $2
  FOR UPDATE SKIP LOCKED
), inbox AS (
  DELETE FROM idem_inbox i USING doomed d WHERE i.saga_type = d.saga_type AND i.key = d.key
), timers AS (
  DELETE FROM idem_timers t USING doomed d WHERE t.saga_type = d.saga_type AND t.key = d.key
), journal AS (
  DELETE FROM idem_journal j USING doomed d WHERE j.saga_type = d.saga_type AND j.key = d.key
)
DELETE FROM idem_instances x USING doomed d WHERE x.saga_type = d.saga_type AND x.key = d.key`

const sweepInboxSQL = `
DELETE FROM idem_inbox WHERE ctid IN (
  SELECT i.ctid FROM idem_inbox i
  WHERE i.processed_at < $1
    AND NOT EXISTS (SELECT 1 FROM idem_instances x WHERE x.saga_type = i.saga_type AND x.key = i.key)
  LIMIT $2
)`

const sweepOutboxSQL = `
DELETE FROM idem_outbox WHERE id IN (
  SELECT id FROM idem_outbox WHERE sent_at IS NOT NULL AND sent_at < $1 ORDER BY sent_at LIMIT $2
)`

// Sweep deletes finished instances (with inbox, timers and journal),
// orphan inbox records and sent outbox rows past retention, each bounded by
// p.Limit, in one transaction. Only this path may delete journal rows.
//
// Orphan inbox records are looked for only once the finished instances are
// caught up (this call deleted fewer than p.Limit): that search reads every
// inbox record older than retention, those of finished instances not yet
// swept included, so running it beside each batch of a large backlog made
// sweeping quadratic. It costs a second round trip in that last call.
func (s *Store) Sweep(ctx context.Context, p *store.SweepParams) (*store.SweepResult, error) {
	if err := s.check("sweep"); err != nil {
		return nil, err
	}
	res := &store.SweepResult{}
	n := sqlq.Limit(p.Limit)
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT set_config('idem.sweeping', 'on', true)`)
		if !p.FinishedBefore.IsZero() {
			b.Queue(sweepInstancesSQL, p.FinishedBefore, n).Exec(func(ct pgconn.CommandTag) error {
				res.Instances = int(ct.RowsAffected())
				return nil
			})
		}
		if !p.SentBefore.IsZero() {
			b.Queue(sweepOutboxSQL, p.SentBefore, n).Exec(func(ct pgconn.CommandTag) error {
				res.Outbox = int(ct.RowsAffected())
				return nil
			})
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil || p.InboxBefore.IsZero() || res.Instances >= n {
			return err
		}
		ct, err := tx.Exec(ctx, sweepInboxSQL, p.InboxBefore, n)
		res.Inbox = int(ct.RowsAffected())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("pgstore: sweep: %w", translate(err))
	}
	return res, nil
}

// ListInstances pages through instances by (saga type, key); see
// memstore for the cursor format.
func (s *Store) ListInstances(ctx context.Context, p *store.ListParams) ([]*store.Instance, error) {
	if err := s.check("list instances"); err != nil {
		return nil, err
	}
	if p == nil {
		p = &store.ListParams{}
	}
	afterType, afterKey, err := sqlq.InstanceCursor(p)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list instances: %w", err)
	}
	rows, err := s.pool.Query(ctx, `
SELECT saga_type, key, state, data, schema_version, version, timers, created_at, updated_at, finished_at, attributes
FROM idem_instances
WHERE ($1 = '' OR saga_type = $1) AND ($2 = '' OR state = $2)
  AND (NOT $3 OR (saga_type COLLATE "C", key COLLATE "C") > ($4 COLLATE "C", $5 COLLATE "C"))
ORDER BY saga_type COLLATE "C", key COLLATE "C"
LIMIT $6`, p.SagaType, p.State, p.After != "", afterType, afterKey, sqlq.Limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: list instances: %w", translate(err))
	}
	defer rows.Close()
	var out []*store.Instance
	for rows.Next() {
		in, err := scanInstance(rows)
		if err != nil {
			return nil, fmt.Errorf("pgstore: list instances: %w", err)
		}
		out = append(out, in)
	}
	return out, translate(rows.Err())
}

// Journal returns the journal of one instance in order.
func (s *Store) Journal(ctx context.Context, k store.Key) ([]store.JournalEntry, error) {
	if err := s.check("journal"); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `
SELECT saga_type, key, raw_key, message_id, event_type, from_state, to_state, version, at, payload, diff, state, coalesce(detail, '')
FROM idem_journal WHERE saga_type = $1 AND key = $2 ORDER BY id`, k.SagaType, k.Key)
	if err != nil {
		return nil, fmt.Errorf("pgstore: journal %s/%s: %w", k.SagaType, k.Key, translate(err))
	}
	defer rows.Close()
	var out []store.JournalEntry
	for rows.Next() {
		var j store.JournalEntry
		var d sqlq.JournalDetail
		if err := rows.Scan(&j.SagaType, &j.Key, &j.RawKey, &j.MessageID, &j.EventType, &j.FromState, &j.ToState, &j.Version, &j.At, &d.Payload, &d.Diff, &d.State, &d.Detail); err != nil {
			return nil, err
		}
		j.At = j.At.UTC()
		if j.JournalDetail, err = sqlq.DecodeJournalDetail(d); err != nil {
			return nil, fmt.Errorf("pgstore: journal %s/%s: %w", k.SagaType, k.Key, err)
		}
		out = append(out, j)
	}
	return out, translate(rows.Err())
}

// ListTimers pages through timers by (due time, saga type, key, name).
func (s *Store) ListTimers(ctx context.Context, p *store.ListParams) ([]store.Timer, error) {
	if err := s.check("list timers"); err != nil {
		return nil, err
	}
	if p == nil {
		p = &store.ListParams{}
	}
	var due pgtype.Timestamptz
	var at, ak, an string
	if p.After != "" {
		t, typ, key, name, err := sqlq.TimerCursor(p.After)
		if err != nil {
			return nil, fmt.Errorf("pgstore: list timers: %w", err)
		}
		due, at, ak, an = pgtype.Timestamptz{Time: t, Valid: true}, typ, key, name
	}
	rows, err := s.pool.Query(ctx, `
SELECT saga_type, key, name, due_at, envelope, body FROM idem_timers
WHERE ($1 = '' OR saga_type = $1)
  AND ($2::timestamptz IS NULL OR (due_at, saga_type COLLATE "C", key COLLATE "C", name COLLATE "C") > ($2, $3 COLLATE "C", $4 COLLATE "C", $5 COLLATE "C"))
ORDER BY due_at, saga_type COLLATE "C", key COLLATE "C", name COLLATE "C"
LIMIT $6`, p.SagaType, due, at, ak, an, sqlq.Limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: list timers: %w", translate(err))
	}
	ts, err := scanTimers(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list timers: %w", err)
	}
	return ts, nil
}

// OutboxBacklog counts unsent outbox rows and the age of the oldest.
func (s *Store) OutboxBacklog(ctx context.Context) (int, time.Time, error) {
	if err := s.check("outbox backlog"); err != nil {
		return 0, time.Time{}, err
	}
	var n int
	var oldest pgtype.Timestamptz
	if err := s.pool.QueryRow(ctx, `SELECT count(*), min(created_at) FROM idem_outbox WHERE sent_at IS NULL`).Scan(&n, &oldest); err != nil {
		return 0, time.Time{}, fmt.Errorf("pgstore: outbox backlog: %w", translate(err))
	}
	if !oldest.Valid {
		return n, time.Time{}, nil
	}
	return n, oldest.Time.UTC(), nil
}

const deadLetterCols = `id, envelope, body, reason, error, saga_type, key, attempts, first_failed_at, last_failed_at,
  CASE WHEN first_reason = '' THEN reason ELSE first_reason END, CASE WHEN first_reason = '' THEN error ELSE first_error END,
  fingerprint, archived_at`

func scanDeadLetter(row pgx.Row) (*store.DeadLetter, error) {
	var d store.DeadLetter
	var meta, body []byte
	var archived *time.Time
	if err := row.Scan(&d.ID, &meta, &body, &d.Reason, &d.Error, &d.SagaType, &d.Key, &d.Attempts, &d.FirstFailedAt, &d.LastFailedAt, &d.FirstReason, &d.FirstError,
		&d.Fingerprint, &archived); err != nil {
		return nil, err
	}
	if archived != nil {
		d.ArchivedAt = archived.UTC()
	}
	env, err := sqlq.DecodeEnvelope(meta, body)
	if err != nil {
		return nil, err
	}
	d.Envelope = env
	normalizeTimes(&d.FirstFailedAt, &d.LastFailedAt)
	return &d, nil
}

// ListDeadLetters pages through dead letters by ID.
func (s *Store) ListDeadLetters(ctx context.Context, p *store.ListParams) ([]store.DeadLetter, error) {
	if err := s.check("list dead letters"); err != nil {
		return nil, err
	}
	if p == nil {
		p = &store.ListParams{}
	}
	rows, err := s.pool.Query(ctx, `SELECT `+deadLetterCols+` FROM idem_dead_letters
WHERE ($1 = '' OR saga_type = $1) AND ($2 = '' OR id COLLATE "C" > $2 COLLATE "C")
ORDER BY id COLLATE "C" LIMIT $3`, p.SagaType, p.After, sqlq.Limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: list dead letters: %w", translate(err))
	}
	defer rows.Close()
	var out []store.DeadLetter
	for rows.Next() {
		d, err := scanDeadLetter(rows)
		if err != nil {
			return nil, fmt.Errorf("pgstore: list dead letters: %w", err)
		}
		out = append(out, *d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: list dead letters: %w", translate(err))
	}
	return out, s.withReplays(ctx, out)
}

// GetDeadLetter returns one dead letter or an error wrapping
// store.ErrNotFound.
func (s *Store) GetDeadLetter(ctx context.Context, id string) (*store.DeadLetter, error) {
	if err := s.check("get dead letter"); err != nil {
		return nil, err
	}
	d, err := scanDeadLetter(s.pool.QueryRow(ctx, `SELECT `+deadLetterCols+` FROM idem_dead_letters WHERE id = $1`, id))
	if err == pgx.ErrNoRows {
		return nil, fmt.Errorf("pgstore: dead letter %s: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: dead letter %s: %w", id, translate(err))
	}
	ds := []store.DeadLetter{*d}
	if err := s.withReplays(ctx, ds); err != nil {
		return nil, err
	}
	return &ds[0], nil
}

// DeleteDeadLetters removes dead letters by ID and returns how many.
func (s *Store) DeleteDeadLetters(ctx context.Context, ids []string) (int, error) {
	if err := s.check("delete dead letters"); err != nil {
		return 0, err
	}
	ct, err := s.pool.Exec(ctx, `DELETE FROM idem_dead_letters WHERE id = ANY($1)`, ids)
	s.groups.drop()
	if err != nil {
		return 0, fmt.Errorf("pgstore: delete %d dead letters: %w", len(ids), translate(err))
	}
	return int(ct.RowsAffected()), nil
}

package pgstore

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
)

var (
	_ store.Scheduler          = (*Store)(nil)
	_ store.ScheduleUnitOfWork = (*unitOfWork)(nil)
)

const scheduleCols = `name, spec, missed, grace, envelope, body, next_due, paused, last_tick, updated_at`

// saveScheduleSQL keeps paused and last_tick, and next_due unless the spec
// changed.
const saveScheduleSQL = `
INSERT INTO idem_schedules (name, spec, missed, grace, envelope, body, next_due, updated_at)
VALUES ($1, $2, $3, $8, $4::jsonb, $5, $6, $7)
ON CONFLICT (name) DO UPDATE
SET spec = excluded.spec, missed = excluded.missed, grace = excluded.grace, envelope = excluded.envelope, body = excluded.body,
    next_due = CASE WHEN idem_schedules.spec = excluded.spec THEN idem_schedules.next_due ELSE excluded.next_due END,
    updated_at = excluded.updated_at`

// SaveSchedule creates or redefines a schedule (see store.Scheduler).
func (s *Store) SaveSchedule(ctx context.Context, sc *store.Schedule) error {
	if err := s.check("save schedule"); err != nil {
		return err
	}
	meta, body, err := sqlq.EncodeEnvelope(sc.Envelope)
	if err != nil {
		return fmt.Errorf("pgstore: save schedule %q: %w", sc.Name, err)
	}
	if _, err := s.pool.Exec(ctx, saveScheduleSQL, sc.Name, sc.Spec, sc.Missed, meta, body, sc.NextDue, sc.UpdatedAt, int64(sc.Grace)); err != nil {
		return fmt.Errorf("pgstore: save schedule %q: %w", sc.Name, translate(err))
	}
	return nil
}

// ListSchedules pages through schedules ordered by name.
func (s *Store) ListSchedules(ctx context.Context, p *store.ListParams) ([]store.Schedule, error) {
	if err := s.check("list schedules"); err != nil {
		return nil, err
	}
	if p == nil {
		p = &store.ListParams{}
	}
	rows, err := s.pool.Query(ctx, `SELECT `+scheduleCols+` FROM idem_schedules WHERE name COLLATE "C" > $1 COLLATE "C" ORDER BY name COLLATE "C" LIMIT $2`,
		p.After, sqlq.Limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("pgstore: list schedules: %w", translate(err))
	}
	out, err := scanSchedules(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: list schedules: %w", translate(err))
	}
	return out, nil
}

// GetSchedule returns one schedule or an error wrapping store.ErrNotFound.
func (s *Store) GetSchedule(ctx context.Context, name string) (*store.Schedule, error) {
	if err := s.check("get schedule"); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+scheduleCols+` FROM idem_schedules WHERE name = $1`, name)
	if err != nil {
		return nil, fmt.Errorf("pgstore: get schedule %q: %w", name, translate(err))
	}
	out, err := scanSchedules(rows)
	if err != nil {
		return nil, fmt.Errorf("pgstore: get schedule %q: %w", name, translate(err))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("pgstore: get schedule %q: %w", name, store.ErrNotFound)
	}
	return &out[0], nil
}

// PauseSchedule sets or clears the paused flag.
func (s *Store) PauseSchedule(ctx context.Context, name string, paused bool, at time.Time) error {
	if err := s.check("pause schedule"); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE idem_schedules SET paused = $2, updated_at = $3 WHERE name = $1`, name, paused, at)
	if err != nil {
		return fmt.Errorf("pgstore: pause schedule %q: %w", name, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgstore: pause schedule %q: %w", name, store.ErrNotFound)
	}
	return nil
}

// DeleteSchedule removes a schedule.
func (s *Store) DeleteSchedule(ctx context.Context, name string) error {
	if err := s.check("delete schedule"); err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `DELETE FROM idem_schedules WHERE name = $1`, name)
	if err != nil {
		return fmt.Errorf("pgstore: delete schedule %q: %w", name, translate(err))
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("pgstore: delete schedule %q: %w", name, store.ErrNotFound)
	}
	return nil
}

// dueSchedulesSQL locks the due rows for this transaction and skips rows
// another replica's transaction holds.
const dueSchedulesSQL = `SELECT ` + scheduleCols + ` FROM idem_schedules
WHERE NOT paused AND next_due <= $1
ORDER BY next_due, name COLLATE "C"
LIMIT $2
FOR UPDATE SKIP LOCKED`

// DueSchedules returns and locks due schedules (with BEGIN, in one round
// trip when it is the unit of work's first statement).
func (u *unitOfWork) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.Schedule, error) {
	if err := u.live("due schedules"); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	if !u.begun {
		b.Queue(beginSQL)
		u.begun = true
	}
	var out []store.Schedule
	b.Queue(dueSchedulesSQL, now, sqlq.Limit(limit)).Query(func(rows pgx.Rows) error {
		var err error
		out, err = scanSchedules(rows)
		return err
	})
	if err := u.conn.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("pgstore: due schedules: %w", translate(err))
	}
	return out, nil
}

// AdvanceSchedules records advances for Commit.
func (u *unitOfWork) AdvanceSchedules(_ context.Context, as []store.ScheduleAdvance) error {
	if err := u.live("advance schedules"); err != nil {
		return err
	}
	u.advance = append(u.advance, as...)
	return nil
}

// advanceSchedulesSQL moves each schedule whose next_due is still the one
// read; idem_expect turns a missing row into a conflict.
const advanceSchedulesSQL = `
WITH moved AS (
  UPDATE idem_schedules s
  SET next_due = u.next_due, last_tick = coalesce(u.fired, s.last_tick)
  FROM unnest($1::text[], $2::timestamptz[], $3::timestamptz[], $4::timestamptz[]) AS u(name, from_due, next_due, fired)
  WHERE s.name = u.name AND s.next_due = u.from_due
  RETURNING 1
)
SELECT idem_expect((SELECT count(*) FROM moved), $5, 'schedule advance')`

// queueAdvances adds the unit of work's schedule advances to a commit.
func (u *unitOfWork) queueAdvances(b *pgx.Batch) {
	n := len(u.advance)
	if n == 0 {
		return
	}
	names, from, to, fired := make([]string, n), make([]time.Time, n), make([]time.Time, n), make([]pgtype.Timestamptz, n)
	for i, a := range u.advance {
		names[i], from[i], to[i] = a.Name, a.From, a.To
		fired[i] = pgtype.Timestamptz{Time: a.Fired, Valid: !a.Fired.IsZero()}
	}
	b.Queue(advanceSchedulesSQL, names, from, to, fired, int64(n))
}

func scanSchedules(rows pgx.Rows) ([]store.Schedule, error) {
	defer rows.Close()
	var out []store.Schedule
	for rows.Next() {
		var sc store.Schedule
		var meta, body []byte
		var last pgtype.Timestamptz
		if err := rows.Scan(&sc.Name, &sc.Spec, &sc.Missed, &sc.Grace, &meta, &body, &sc.NextDue, &sc.Paused, &last, &sc.UpdatedAt); err != nil {
			return nil, err
		}
		env, err := sqlq.DecodeEnvelope(meta, body)
		if err != nil {
			return nil, fmt.Errorf("decode envelope of schedule %q: %w", sc.Name, err)
		}
		sc.Envelope = env
		if last.Valid {
			sc.LastTick = last.Time
		}
		normalizeTimes(&sc.NextDue, &sc.LastTick, &sc.UpdatedAt)
		out = append(out, sc)
	}
	return out, rows.Err()
}

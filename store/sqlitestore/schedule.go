package sqlitestore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

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
VALUES (?1, ?2, ?3, ?8, ?4, ?5, ?6, ?7)
ON CONFLICT (name) DO UPDATE
SET spec = excluded.spec, missed = excluded.missed, grace = excluded.grace, envelope = excluded.envelope, body = excluded.body,
    next_due = CASE WHEN idem_schedules.spec = excluded.spec THEN idem_schedules.next_due ELSE excluded.next_due END,
    updated_at = excluded.updated_at`

// SaveSchedule creates or redefines a schedule (see store.Scheduler).
func (s *Store) SaveSchedule(ctx context.Context, sc *store.Schedule) error {
	meta, body, err := sqlq.EncodeEnvelope(sc.Envelope)
	if err != nil {
		return fmt.Errorf("sqlitestore: save schedule %q: %w", sc.Name, err)
	}
	err = s.write(ctx, "save schedule", 0, func(w *writer) error {
		_, err := w.exec(saveScheduleSQL, sc.Name, sc.Spec, sc.Missed, meta, body, micros(sc.NextDue), micros(sc.UpdatedAt), int64(sc.Grace))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlitestore: save schedule %q: %w", sc.Name, err)
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
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+scheduleCols+` FROM idem_schedules WHERE name > ?1 ORDER BY name LIMIT ?2`, p.After, sqlq.Limit(p.Limit))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list schedules: %w", err)
	}
	out, err := scanSchedules(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: list schedules: %w", err)
	}
	return out, nil
}

// GetSchedule returns one schedule or an error wrapping store.ErrNotFound.
func (s *Store) GetSchedule(ctx context.Context, name string) (*store.Schedule, error) {
	if err := s.check("get schedule"); err != nil {
		return nil, err
	}
	rows, err := s.rdb.QueryContext(ctx, `SELECT `+scheduleCols+` FROM idem_schedules WHERE name = ?1`, name)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: get schedule %q: %w", name, err)
	}
	out, err := scanSchedules(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: get schedule %q: %w", name, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("sqlitestore: get schedule %q: %w", name, store.ErrNotFound)
	}
	return &out[0], nil
}

// PauseSchedule sets or clears the paused flag.
func (s *Store) PauseSchedule(ctx context.Context, name string, paused bool, at time.Time) error {
	return s.changeSchedule(ctx, "pause schedule", name, `UPDATE idem_schedules SET paused = ?2, updated_at = ?3 WHERE name = ?1`, name, paused, micros(at))
}

// DeleteSchedule removes a schedule.
func (s *Store) DeleteSchedule(ctx context.Context, name string) error {
	return s.changeSchedule(ctx, "delete schedule", name, `DELETE FROM idem_schedules WHERE name = ?1`, name)
}

// changeSchedule runs q, which must change the row of schedule name.
func (s *Store) changeSchedule(ctx context.Context, op, name, q string, args ...any) error {
	errMissing := errors.New("missing")
	err := s.write(ctx, op, 0, func(w *writer) error {
		n, err := w.exec(q, args...)
		if err == nil && n == 0 {
			return errMissing
		}
		return err
	})
	if errors.Is(err, errMissing) {
		return fmt.Errorf("sqlitestore: %s %q: %w", op, name, store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("sqlitestore: %s %q: %w", op, name, err)
	}
	return nil
}

// DueSchedules reads the due schedules from the committed state; nothing
// is locked, and Commit checks each advance against the stored next_due
// inside the write transaction.
func (u *unitOfWork) DueSchedules(ctx context.Context, now time.Time, limit int) ([]store.Schedule, error) {
	if err := u.live("due schedules"); err != nil {
		return nil, err
	}
	rows, err := u.s.rdb.QueryContext(ctx, `SELECT `+scheduleCols+` FROM idem_schedules
WHERE paused = 0 AND next_due <= ?1 ORDER BY next_due, name LIMIT ?2`, micros(now), sqlq.Limit(limit))
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: due schedules: %w", err)
	}
	out, err := scanSchedules(rows)
	if err != nil {
		return nil, fmt.Errorf("sqlitestore: due schedules: %w", err)
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

const advanceScheduleSQL = `UPDATE idem_schedules SET next_due = ?3, last_tick = coalesce(?4, last_tick) WHERE name = ?1 AND next_due = ?2`

// planAdvances returns the statements of the unit of work's schedule
// advances, each a conflict unless it moves exactly one row.
func (u *unitOfWork) planAdvances() []op {
	ops := make([]op, 0, len(u.advance))
	for _, a := range u.advance {
		name, from := a.Name, a.From
		ops = append(ops, op{sql: advanceScheduleSQL, args: []any{a.Name, micros(a.From), micros(a.To), nullMicros(a.Fired)}, check: func(n int64, err error) error {
			if err == nil && n != 1 {
				return fmt.Errorf("%w: advance schedule %q from %s: another unit of work advanced, redefined or deleted it",
					store.ErrConflict, name, from.Format(time.RFC3339Nano))
			}
			return err
		}})
	}
	return ops
}

func scanSchedules(rows *sql.Rows) ([]store.Schedule, error) {
	defer rows.Close()
	var out []store.Schedule
	for rows.Next() {
		var sc store.Schedule
		var meta string
		var body []byte
		var next, updated int64
		var last sql.NullInt64
		if err := rows.Scan(&sc.Name, &sc.Spec, &sc.Missed, &sc.Grace, &meta, &body, &next, &sc.Paused, &last, &updated); err != nil {
			return nil, err
		}
		env, err := sqlq.DecodeEnvelope([]byte(meta), body)
		if err != nil {
			return nil, fmt.Errorf("decode envelope of schedule %q: %w", sc.Name, err)
		}
		sc.Envelope = env
		sc.NextDue, sc.LastTick, sc.UpdatedAt = fromMicros(next), fromNullMicros(last), fromMicros(updated)
		out = append(out, sc)
	}
	return out, rows.Err()
}

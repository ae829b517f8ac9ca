package store

import (
	"context"
	"time"

	"github.com/idemhq/idem/transport"
)

// Missed-tick policies of a Schedule.
const (
	// MissedFireOnce catches up after ticks were missed (every replica was
	// down, the schedule was paused) with one message, for the latest
	// missed tick.
	MissedFireOnce = "fire_once"
	// MissedSkip sends nothing for missed ticks: the schedule resumes at
	// its next tick in the future.
	MissedSkip = "skip"
)

// Schedule is a recurring message: every tick of Spec, the engine publishes
// a copy of Envelope whose ID is derived from (Name, tick time). Name
// identifies a schedule.
type Schedule struct {
	Name string `json:"name"`
	// Spec is the recurrence as the engine reads it ("@every 1m0s" or a
	// cron expression). The store keeps it as text.
	Spec string `json:"spec"`
	// Missed is MissedFireOnce or MissedSkip.
	Missed string `json:"missed"`
	// Grace is how late a tick may still fire under MissedSkip; a tick
	// found due later than that is skipped.
	Grace time.Duration `json:"grace"`
	// Envelope is the template of each tick's message (type, correlation
	// ID, headers, body); its ID and SentAt are set per tick.
	Envelope transport.Envelope `json:"envelope"`
	// NextDue is the time of the next tick to fire.
	NextDue time.Time `json:"next_due"`
	// Paused schedules are never due.
	Paused bool `json:"paused"`
	// LastTick is the time of the last tick that published a message; zero
	// when none has.
	LastTick time.Time `json:"last_tick,omitzero"`
	// UpdatedAt is when the definition or the paused flag last changed.
	UpdatedAt time.Time `json:"updated_at"`
}

// ScheduleAdvance moves one schedule past a tick inside a unit of work.
type ScheduleAdvance struct {
	Name string
	// From is the NextDue read by DueSchedules. When the stored NextDue
	// differs at commit (another replica advanced it, or the schedule was
	// deleted or redefined), Commit fails with ErrConflict and nothing of
	// the unit of work is written.
	From time.Time
	// To is the new NextDue.
	To time.Time
	// Fired is the tick whose message the unit of work publishes, stored
	// as LastTick; zero when the tick was skipped (LastTick is kept).
	Fired time.Time
}

// Scheduler is implemented by stores that keep recurring schedules. The
// engine fires them through ScheduleUnitOfWork, so that advancing a
// schedule and publishing its message commit together.
type Scheduler interface {
	// SaveSchedule creates the schedule s.Name or updates its definition,
	// idempotently: a new schedule gets s.NextDue and is not paused; an
	// existing one keeps its paused flag and its LastTick, and keeps its
	// NextDue unless s.Spec differs from the stored spec (then NextDue
	// becomes s.NextDue). s.Paused and s.LastTick are ignored.
	SaveSchedule(ctx context.Context, s *Schedule) error
	// ListSchedules pages through schedules ordered by name; p.After is
	// the last name of the previous page. Other filters are ignored.
	ListSchedules(ctx context.Context, p *ListParams) ([]Schedule, error)
	// GetSchedule returns one schedule or an error wrapping ErrNotFound.
	GetSchedule(ctx context.Context, name string) (*Schedule, error)
	// PauseSchedule sets the paused flag; the error wraps ErrNotFound when
	// there is no such schedule. Pausing keeps NextDue: on resume, the
	// ticks missed meanwhile follow the schedule's Missed policy.
	PauseSchedule(ctx context.Context, name string, paused bool, at time.Time) error
	// DeleteSchedule removes a schedule; the error wraps ErrNotFound when
	// there is no such schedule. A replica that registers it again at
	// start-up creates it anew.
	DeleteSchedule(ctx context.Context, name string) error
}

// ScheduleUnitOfWork is implemented by the units of work of a Scheduler.
type ScheduleUnitOfWork interface {
	UnitOfWork
	// DueSchedules returns at most limit schedules that are not paused and
	// whose NextDue is at or before now, ordered by NextDue. A store that
	// can lock rows (PostgreSQL) locks them until the unit of work ends
	// and skips rows another unit of work holds.
	DueSchedules(ctx context.Context, now time.Time, limit int) ([]Schedule, error)
	// AdvanceSchedules records advances that Commit writes with the rest
	// of the unit of work (see ScheduleAdvance.From for the conflict rule).
	AdvanceSchedules(ctx context.Context, as []ScheduleAdvance) error
}

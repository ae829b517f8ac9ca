package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// listSchedules reads the page of at most limit schedules after the name
// after, for GET /api/schedules and the console; the error wraps
// errNoSchedules when the store keeps none.
func (p *parts) listSchedules(ctx context.Context, after string, limit int) (*ScheduleList, error) {
	sc := p.caps.schedules
	if sc == nil {
		return nil, fmt.Errorf("list schedules: store %T: %w", p.st, errNoSchedules)
	}
	list, err := sc.ListSchedules(ctx, &store.ListParams{After: after, Limit: limit})
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	out := &ScheduleList{Schedules: make([]Schedule, 0, len(list))}
	for _, x := range list {
		out.Schedules = append(out.Schedules, toSchedule(&x))
	}
	if len(list) == limit {
		out.Next = list[len(list)-1].Name
	}
	return out, nil
}

// pauseSchedule sets (paused) or clears the paused flag of schedule name,
// for the API and the console. The error is a badScheduleName, wraps
// errNoSchedules, or wraps store.ErrNotFound when there is no such
// schedule.
func (p *parts) pauseSchedule(ctx context.Context, name string, paused bool) error {
	if err := idem.ValidateScheduleName(name); err != nil {
		return badScheduleName{err}
	}
	sc := p.caps.schedules
	if sc == nil {
		return fmt.Errorf("pause schedule: store %T: %w", p.st, errNoSchedules)
	}
	if err := sc.PauseSchedule(ctx, name, paused, time.Now()); err != nil {
		return fmt.Errorf("pause schedule %q: %w", name, err)
	}
	return nil
}

package memstore

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/idemhq/idem/store"
)

var (
	_ store.Scheduler          = (*Store)(nil)
	_ store.ScheduleUnitOfWork = (*unitOfWork)(nil)
)

// SaveSchedule creates or redefines a schedule (see store.Scheduler).
func (s *Store) SaveSchedule(ctx context.Context, sc *store.Schedule) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "save schedule"); err != nil {
		return err
	}
	if s.schedules == nil {
		s.schedules = make(map[string]*store.Schedule)
	}
	next := cloneSchedule(*sc)
	next.Paused, next.LastTick = false, time.Time{}
	if old := s.schedules[sc.Name]; old != nil {
		next.Paused, next.LastTick = old.Paused, old.LastTick
		if old.Spec == sc.Spec {
			next.NextDue = old.NextDue
		}
	}
	s.schedules[sc.Name] = &next
	return nil
}

// ListSchedules pages through schedules ordered by name.
func (s *Store) ListSchedules(ctx context.Context, p *store.ListParams) ([]store.Schedule, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "list schedules"); err != nil {
		return nil, err
	}
	if p == nil {
		p = &store.ListParams{}
	}
	var out []store.Schedule
	for name, sc := range s.schedules {
		if name > p.After {
			out = append(out, cloneSchedule(*sc))
		}
	}
	slices.SortFunc(out, func(a, b store.Schedule) int { return strings.Compare(a.Name, b.Name) })
	if n := limit(p.Limit); len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// GetSchedule returns one schedule or an error wrapping store.ErrNotFound.
func (s *Store) GetSchedule(ctx context.Context, name string) (*store.Schedule, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "get schedule"); err != nil {
		return nil, err
	}
	sc := s.schedules[name]
	if sc == nil {
		return nil, fmt.Errorf("memstore: get schedule %q: %w", name, store.ErrNotFound)
	}
	c := cloneSchedule(*sc)
	return &c, nil
}

// PauseSchedule sets or clears the paused flag.
func (s *Store) PauseSchedule(ctx context.Context, name string, paused bool, at time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "pause schedule"); err != nil {
		return err
	}
	sc := s.schedules[name]
	if sc == nil {
		return fmt.Errorf("memstore: pause schedule %q: %w", name, store.ErrNotFound)
	}
	sc.Paused, sc.UpdatedAt = paused, at
	return nil
}

// DeleteSchedule removes a schedule.
func (s *Store) DeleteSchedule(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx, "delete schedule"); err != nil {
		return err
	}
	if s.schedules[name] == nil {
		return fmt.Errorf("memstore: delete schedule %q: %w", name, store.ErrNotFound)
	}
	delete(s.schedules, name)
	return nil
}

// DueSchedules returns copies of the due schedules; nothing is locked, and
// Commit checks each advance against the stored NextDue.
func (u *unitOfWork) DueSchedules(ctx context.Context, now time.Time, n int) ([]store.Schedule, error) {
	if u.done {
		return nil, fmt.Errorf("memstore: due schedules: %w", errFinished)
	}
	s := u.s
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx, "due schedules"); err != nil {
		return nil, err
	}
	var out []store.Schedule
	for _, sc := range s.schedules {
		if !sc.Paused && !sc.NextDue.After(now) {
			out = append(out, cloneSchedule(*sc))
		}
	}
	slices.SortFunc(out, func(a, b store.Schedule) int {
		if c := a.NextDue.Compare(b.NextDue); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	if n := limit(n); len(out) > n {
		out = out[:n]
	}
	return out, nil
}

// AdvanceSchedules records advances for Commit.
func (u *unitOfWork) AdvanceSchedules(_ context.Context, as []store.ScheduleAdvance) error {
	if u.done {
		return fmt.Errorf("memstore: advance schedules: %w", errFinished)
	}
	u.advance = append(u.advance, as...)
	return nil
}

// checkAdvances fails with store.ErrConflict when a schedule's NextDue is
// no longer the one an advance read. The caller holds s.mu for writing.
func (s *Store) checkAdvances(as []store.ScheduleAdvance) error {
	seen := make(map[string]bool, len(as))
	for _, a := range as {
		sc := s.schedules[a.Name]
		if sc == nil || !sc.NextDue.Equal(a.From) || seen[a.Name] {
			return fmt.Errorf("memstore: advance schedule %q from %s: %w: another unit of work advanced, redefined or deleted it",
				a.Name, a.From.Format(time.RFC3339Nano), store.ErrConflict)
		}
		seen[a.Name] = true
	}
	return nil
}

// applyAdvances writes advances that checkAdvances accepted. The caller
// holds s.mu for writing.
func (s *Store) applyAdvances(as []store.ScheduleAdvance) {
	for _, a := range as {
		sc := s.schedules[a.Name]
		sc.NextDue = a.To
		if !a.Fired.IsZero() {
			sc.LastTick = a.Fired
		}
	}
}

func cloneSchedule(sc store.Schedule) store.Schedule {
	sc.Envelope = sc.Envelope.Clone()
	return sc
}

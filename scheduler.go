package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
)

// scheduleFirer is the part of the timer poller that fires due schedules
// (Every, Cron): one unit of work advances a batch of them and writes
// their tick messages, which are then published.
type scheduleFirer struct {
	*base
	unplanned unplanned
}

// pass fires every due schedule once (see Engine.RunSchedules). It fires every due schedule of the store, also
// those this engine did not register: a tick's message is built from the
// stored row alone. A tick another replica claimed first is left to it; a
// row this engine cannot plan is left as it is (see unplanned).
func (f *scheduleFirer) pass(ctx context.Context) (total int, err error) {
	ctx, end := f.trace.background(ctx, TaskSchedules)
	defer func() { end(total, err) }()
	for {
		b, err := f.batch(ctx)
		total += b.fired
		if err != nil || !b.more {
			return total, err
		}
	}
}

// scheduleBatch is what one unit of work of RunSchedules did.
type scheduleBatch struct {
	fired    int  // tick messages committed
	advanced int  // schedules advanced (fired or skipped) by the commit
	more     bool // more schedules may be due: run another batch
}

// batch advances up to BatchSize due schedules in one unit of
// work. It asks the store for as many more rows as it knows it cannot
// plan, so that rows it leaves due do not fill every batch; another batch
// is worth running only when the store returned all it was asked for and
// this one made progress (advanced a schedule or found a row it cannot
// plan), so the loop ends.
func (f *scheduleFirer) batch(ctx context.Context) (scheduleBatch, error) {
	uow, err := f.store.Begin(ctx)
	if err != nil {
		return scheduleBatch{}, fmt.Errorf("idem: fire schedules: %w", err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	su, ok := scheduleUnit(uow)
	if !ok {
		return scheduleBatch{}, fmt.Errorf("idem: fire schedules: the units of work of %T are not store.ScheduleUnitOfWork", f.store)
	}
	now := f.cfg.Clock()
	limit := f.cfg.BatchSize + f.unplanned.count()
	due, err := su.DueSchedules(ctx, now, limit)
	if err != nil || len(due) == 0 {
		return scheduleBatch{}, err
	}
	advs, envs, found := f.planTicks(ctx, due, now)
	full := len(due) == limit
	if len(advs) == 0 {
		return scheduleBatch{more: full && found}, nil
	}
	outbox, err := f.commitTicks(ctx, uow, su, advs, envs, now)
	if errors.Is(err, store.ErrConflict) {
		// Another replica advanced one of them: it runs the next batch.
		f.log.DebugContext(ctx, "schedule tick claimed by another replica", "error", err)
		return scheduleBatch{}, nil
	} else if err != nil {
		return scheduleBatch{}, fmt.Errorf("idem: fire %d schedules: %w", len(advs), err)
	}
	f.publish(ctx, outbox)
	return scheduleBatch{fired: len(envs), advanced: len(advs), more: full}, nil
}

// commitTicks advances the schedules and writes their tick messages
// (enqueued when the store is the queue, else into the outbox) in uow,
// and commits it. It returns the outbox rows to publish; an error wraps
// store.ErrConflict when another replica advanced a schedule first.
func (f *scheduleFirer) commitTicks(ctx context.Context, uow store.UnitOfWork, su store.ScheduleUnitOfWork, advs []store.ScheduleAdvance, envs []Envelope, now time.Time) ([]store.OutboxMessage, error) {
	if err := su.AdvanceSchedules(ctx, advs); err != nil {
		return nil, err
	}
	c := &store.Changes{}
	if q, ok := queueUnit(uow); ok && f.caps.queue {
		if err := q.Enqueue(ctx, envs); err != nil {
			return nil, err
		}
	} else {
		for _, env := range envs {
			c.Outbox = append(c.Outbox, store.OutboxMessage{Envelope: env, CreatedAt: now})
		}
	}
	if err := uow.Commit(ctx, c); err != nil {
		return nil, err
	}
	return c.Outbox, nil
}

// FiredTick is a tick Engine.FireSchedule fired.
type FiredTick struct {
	// Tick is the tick fired: the schedule's next one, fired early.
	Tick time.Time
	// MessageID is the tick's message ID, TickID(name, Tick): the same a
	// replica firing that tick on time derives, so the tick is sent once.
	MessageID string
	// NextDue is the schedule's next tick after it.
	NextDue time.Time
}

// fireNow fires schedule name's next tick at once and advances the
// schedule past it (see Engine.FireSchedule).
func (f *scheduleFirer) fireNow(ctx context.Context, name string, tick time.Time) (*FiredTick, error) {
	if f.caps.scheduler == nil {
		return nil, fmt.Errorf("idem: fire schedule %q: store %T does not keep schedules (store.Scheduler)", name, f.store)
	}
	s, err := f.caps.scheduler.GetSchedule(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("idem: fire schedule %q: %w", name, err)
	}
	if !tick.IsZero() && !tick.Equal(s.NextDue) {
		return nil, fmt.Errorf("idem: fire schedule %q: its next tick is %s, not %s (fired meanwhile?): %w", name,
			s.NextDue.UTC().Format(time.RFC3339Nano), tick.UTC().Format(time.RFC3339Nano), store.ErrConflict)
	}
	// Planned as if it were the next tick's time: that tick, and no other.
	adv, env, err := planTick(s, s.NextDue)
	if err != nil {
		return nil, fmt.Errorf("idem: fire schedule %q: %w", name, err)
	}
	now := f.cfg.Clock()
	env.SentAt = now
	uow, err := f.store.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("idem: fire schedule %q: %w", name, err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	su, ok := scheduleUnit(uow)
	if !ok {
		return nil, fmt.Errorf("idem: fire schedule %q: the units of work of %T are not store.ScheduleUnitOfWork", name, f.store)
	}
	outbox, err := f.commitTicks(ctx, uow, su, []store.ScheduleAdvance{adv}, []Envelope{*env}, now)
	if errors.Is(err, store.ErrConflict) {
		return nil, fmt.Errorf("idem: fire schedule %q: its tick at %s fired meanwhile, or the schedule changed: %w", name, adv.Fired.UTC().Format(time.RFC3339), err)
	} else if err != nil {
		return nil, fmt.Errorf("idem: fire schedule %q: %w", name, err)
	}
	f.publish(ctx, outbox)
	return &FiredTick{Tick: adv.Fired, MessageID: env.ID, NextDue: adv.To}, nil
}

// planTicks plans the due schedules at now. Rows it cannot plan are left
// out and noted; found reports whether one was new.
func (f *scheduleFirer) planTicks(ctx context.Context, due []store.Schedule, now time.Time) (advs []store.ScheduleAdvance, envs []Envelope, found bool) {
	for _, s := range due {
		adv, env, err := planTick(&s, now)
		if err != nil {
			if f.unplanned.note(s.Name, err.Error()) {
				found = true
				f.log.ErrorContext(ctx, "schedule not fired: this engine cannot plan it, and leaves it as it is for a replica that can; fix it (register it again) or delete it (idem schedules delete)",
					"schedule", s.Name, "error", err)
			}
			continue
		}
		f.unplanned.planned(s.Name)
		advs = append(advs, adv)
		if env != nil {
			envs = append(envs, *env)
		}
	}
	return advs, envs, found
}

// unplanned remembers the stored schedules the poller cannot plan: a spec
// it cannot parse or that never matches, a missed-tick policy it does not
// know (a newer build saved the row, say), a template that makes no valid
// message. Such a row is neither fired, advanced nor paused: pausing it
// would silence it for every replica, also those of a build that can fire
// it, and outlive the cause. It stays due, so each poll reads it again;
// it is logged once per engine and reason, and DueSchedules is asked for
// that many more rows, so that such rows cannot fill every batch and hold
// up the schedules behind them.
type unplanned struct {
	mu   sync.Mutex
	rows map[string]string // schedule name → why it cannot be planned
}

func (u *unplanned) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.rows)
}

// note records why schedule name cannot be planned; it reports whether
// that is news (a new row, or a new reason).
func (u *unplanned) note(name, why string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	if old, ok := u.rows[name]; ok && old == why {
		return false
	}
	if u.rows == nil {
		u.rows = map[string]string{}
	}
	u.rows[name] = why
	return true
}

// planned forgets schedule name: it can be planned now (redefined).
func (u *unplanned) planned(name string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	delete(u.rows, name)
}

// publish hands committed outbox rows to the transport at once; the
// outbox relay sends them later if this fails.
func (f *scheduleFirer) publish(ctx context.Context, rows []store.OutboxMessage) {
	if len(rows) == 0 {
		return
	}
	envs, ids := make([]Envelope, len(rows)), make([]string, len(rows))
	for i, r := range rows {
		envs[i], ids[i] = r.Envelope, r.Envelope.ID
	}
	if err := f.tr.Publish(ctx, envs); err != nil {
		f.log.WarnContext(ctx, "publish of schedule ticks failed; the outbox relay will send", "messages", len(envs), "error", err)
		return
	}
	if err := f.store.MarkSent(ctx, ids, f.cfg.Clock()); err != nil {
		f.log.WarnContext(ctx, "mark schedule ticks sent", "messages", len(ids), "error", err)
	}
}

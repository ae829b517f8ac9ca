package idem

import (
	"context"
	"fmt"

	"github.com/idemhq/idem/store"
)

// timerPoller is the background service that fires due timers, and then
// due schedules when the engine registered one, every
// Config.TimerInterval.
type timerPoller struct {
	*base
	schedules *scheduleFirer // nil: no schedule registered
}

// run polls until ctx ends.
func (t *timerPoller) run(ctx context.Context) error {
	repeat(ctx, t.cfg.TimerInterval, func(ctx context.Context) {
		if _, err := t.pass(ctx); err != nil && ctx.Err() == nil {
			t.log.Error("fire timers", "error", err)
		}
		if t.schedules == nil {
			return
		}
		if _, err := t.schedules.pass(ctx); err != nil && ctx.Err() == nil {
			t.log.Error("fire schedules", "error", err)
		}
	})
	return nil
}

// pass fires every due timer once and returns how many fired.
func (t *timerPoller) pass(ctx context.Context) (total int, err error) {
	ctx, end := t.trace.background(ctx, TaskTimers)
	defer func() { end(total, err) }()
	for {
		ts, err := t.store.ClaimTimers(ctx, &store.ClaimParams{Now: t.cfg.Clock(), Limit: t.cfg.BatchSize, Lease: t.cfg.ClaimLease})
		if err != nil || len(ts) == 0 {
			return total, err
		}
		envs := make([]Envelope, len(ts))
		for i, tm := range ts {
			envs[i] = tm.Envelope
		}
		if err := t.tr.Publish(ctx, envs); err != nil {
			return total, fmt.Errorf("idem: publish %d timers: %w", len(envs), err)
		}
		if err := t.store.DeleteTimers(ctx, ts); err != nil {
			return total, fmt.Errorf("idem: delete %d fired timers: %w", len(ts), err)
		}
		total += len(ts)
		t.obs.passed(TaskTimers, len(ts), 0)
		if len(ts) < t.cfg.BatchSize {
			return total, nil
		}
	}
}

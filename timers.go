package idem

import (
	"context"
	"fmt"
	"log/slog"
	"time"

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
// A pass that fails pauses the poller, longer while passes keep failing,
// and an error that repeats is logged once with a count (failures).
func (t *timerPoller) run(ctx context.Context) error {
	timers := newFailures(t.base, slog.LevelError, "fire timers")
	schedules := newFailures(t.base, slog.LevelError, "fire schedules")
	repeat(ctx, t.cfg.TimerInterval, func(ctx context.Context) {
		_, err := t.pass(ctx)
		pause := paced(ctx, timers, err)
		if t.schedules != nil {
			_, err = t.schedules.pass(ctx)
			pause = max(pause, paced(ctx, schedules, err))
		}
		if pause > 0 {
			sleepCtx(ctx, pause)
		}
	})
	return nil
}

// paced records the outcome of a loop's pass in f and returns the pause
// it asks for: none after a success, or when ctx ended.
func paced(ctx context.Context, f *failures, err error) time.Duration {
	switch {
	case ctx.Err() != nil:
		return 0
	case err != nil:
		return f.failed(ctx, err)
	}
	f.ok(ctx)
	return 0
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

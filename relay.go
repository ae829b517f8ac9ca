package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// relay is the background service that sends outbox messages left unsent
// (their engine crashed after committing) every Config.RelayInterval. An
// engine on the store's own queue has no relay: emissions are enqueued in
// the unit of work.
type relay struct{ *base }

// run relays until ctx ends.
// A pass that fails pauses the relay, longer while passes keep failing,
// and an error that repeats is logged once with a count (failures).
func (r *relay) run(ctx context.Context) error {
	fails := newFailures(r.base, slog.LevelError, "relay outbox")
	repeat(ctx, r.cfg.RelayInterval, func(ctx context.Context) {
		_, err := r.pass(ctx, r.cfg.RelayAge)
		if pause := paced(ctx, fails, err); pause > 0 {
			sleepCtx(ctx, pause)
		}
	})
	return nil
}

// pass sends the outbox messages unsent for longer than age and returns
// how many it sent.
func (r *relay) pass(ctx context.Context, age time.Duration) (total int, err error) {
	ctx, end := r.trace.background(ctx, TaskRelay)
	defer func() { end(total, err) }()
	for {
		now := r.cfg.Clock()
		before := now.Add(-age)
		if age == 0 {
			before = now.Add(time.Nanosecond) // everything, including rows created now
		}
		ms, err := r.store.ClaimOutbox(ctx, &store.ClaimParams{Now: now, Limit: r.cfg.BatchSize, Lease: r.cfg.ClaimLease, CreatedBefore: before})
		if err != nil || len(ms) == 0 {
			return total, err
		}
		envs := make([]Envelope, len(ms))
		ids := make([]string, len(ms))
		for i, m := range ms {
			envs[i], ids[i] = m.Envelope, m.Envelope.ID
		}
		if err := r.tr.Publish(ctx, envs); errors.Is(err, transport.ErrTooLarge) {
			// One message the transport can never carry must not hold back
			// the others of its batch on every pass.
			if ids, err = r.oneByOne(ctx, ms); err != nil {
				return total, err
			}
		} else if err != nil {
			return total, fmt.Errorf("idem: relay %d outbox messages: %w", len(envs), err)
		}
		if err := r.store.MarkSent(ctx, ids, r.cfg.Clock()); err != nil {
			return total, fmt.Errorf("idem: mark %d relayed messages sent: %w", len(ids), err)
		}
		total += len(ms)
		r.obs.passed(TaskRelay, len(ms), 0)
		if len(ms) < r.cfg.BatchSize {
			return total, nil
		}
	}
}

// oneByOne publishes ms one at a time, after their batch was refused
// as too large: a message refused again with transport.ErrTooLarge is
// recorded as a dead letter (ReasonUndeliverable) and returned with the
// sent ones, to be marked sent; any other failure stops the relay.
func (r *relay) oneByOne(ctx context.Context, ms []store.OutboxMessage) ([]string, error) {
	var done []string
	var dead []store.DeadLetter
	for _, m := range ms {
		err := r.tr.Publish(ctx, []Envelope{m.Envelope})
		switch {
		case errors.Is(err, transport.ErrTooLarge):
			now := r.cfg.Clock()
			dead = append(dead, store.DeadLetter{
				ID: m.Envelope.ID, Envelope: m.Envelope, Reason: ReasonUndeliverable, Error: err.Error(),
				SagaType: m.Envelope.Headers[transport.HeaderSagaType], Key: m.Envelope.Headers[transport.HeaderSagaKey],
				Attempts: 1, FirstFailedAt: now, LastFailedAt: now,
			})
		case err != nil:
			if derr := r.recordUndeliverable(ctx, dead); derr != nil {
				return nil, derr
			}
			return nil, fmt.Errorf("idem: relay outbox message %s: %w", m.Envelope.ID, err)
		}
		done = append(done, m.Envelope.ID)
	}
	if err := r.recordUndeliverable(ctx, dead); err != nil {
		return nil, err
	}
	return done, nil
}

// recordUndeliverable stores the dead letters of messages the transport
// refused, before their outbox rows are marked sent.
func (r *relay) recordUndeliverable(ctx context.Context, dead []store.DeadLetter) error {
	if len(dead) == 0 {
		return nil
	}
	uow, err := r.store.Begin(ctx)
	if err != nil {
		return fmt.Errorf("idem: record %d undeliverable messages: %w", len(dead), err)
	}
	if err := uow.Commit(ctx, &store.Changes{DeadLetters: dead}); err != nil {
		_ = uow.Rollback(ctx)
		return fmt.Errorf("idem: record %d undeliverable messages: %w", len(dead), err)
	}
	for _, d := range dead {
		r.log.Error("outbox message undeliverable: dead-lettered", logMessageID, d.ID, "message_type", d.Envelope.Type, "error", d.Error)
	}
	r.obs.passed(TaskRelay, 0, len(dead))
	return nil
}

package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/idemhq/idem/store"
)

// sweeper is the background service that deletes, every
// Config.SweepInterval and in batches of Config.SweepBatch, finished sagas
// older than Config.Retention (with their inbox records, timers and
// journal), handler inbox records older than Config.Retention, sent
// outbox rows older than Config.OutboxRetention and, on a store that is a
// store.TokenSweeper, dedup tokens nobody claimed within
// Config.TokenRetention, on a store.RetrySweeper, retries whose next
// attempt is older than Config.Retention (their message never came back)
// and, on a store.Limiter, the flow-control counters no decision needs
// (idle for Config.LimitCounterIdle) and expired holds, and the limits'
// declarations that no running engine refreshed for forgetAfter.
type sweeper struct {
	*base
	// forgetAfter is the age of a declaration the sweeper forgets
	// (forgetDeclarationsAfter).
	forgetAfter time.Duration
}

// run sweeps until ctx ends.
func (s *sweeper) run(ctx context.Context) error {
	repeat(ctx, s.cfg.SweepInterval, func(ctx context.Context) {
		if _, err := s.pass(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("sweep", "error", err)
		}
	})
	return nil
}

// pass sweeps until nothing is left to delete.
func (s *sweeper) pass(ctx context.Context) (total store.SweepResult, err error) {
	ctx, end := s.trace.background(ctx, TaskSweep)
	defer func() { end(total.Instances+total.Inbox+total.Outbox, err) }()
	for {
		now := s.cfg.Clock()
		r, err := s.store.Sweep(ctx, &store.SweepParams{
			FinishedBefore: now.Add(-s.cfg.Retention),
			InboxBefore:    now.Add(-s.cfg.Retention),
			SentBefore:     now.Add(-s.cfg.OutboxRetention),
			Limit:          s.cfg.SweepBatch,
		})
		if err != nil {
			return total, fmt.Errorf("idem: sweep: %w", err)
		}
		total.Instances += r.Instances
		total.Inbox += r.Inbox
		total.Outbox += r.Outbox
		if r.Instances < s.cfg.SweepBatch && r.Inbox < s.cfg.SweepBatch && r.Outbox < s.cfg.SweepBatch {
			if err := s.sweepTokens(ctx); err != nil {
				return total, err
			}
			if err := s.sweepRetries(ctx); err != nil {
				return total, err
			}
			if err := s.sweepCounters(ctx); err != nil {
				return total, err
			}
			if err := s.forgetDeclarations(ctx); err != nil {
				return total, err
			}
			s.obs.passed(TaskSweep, total.Instances, 0)
			return total, nil
		}
	}
}

// sweepTokens deletes the tokens minted before Config.TokenRetention ago,
// in batches, when the store can (store.TokenSweeper). Each batch starts
// where the previous one ended (store.TokenSweep.Next), so the tokens kept
// for dead letters are read once a pass, not once a batch.
func (s *sweeper) sweepTokens(ctx context.Context) error {
	ts, ok := s.store.(store.TokenSweeper)
	if !ok {
		return nil
	}
	p := &store.StaleTokens{MintedBefore: s.cfg.Clock().Add(-s.cfg.TokenRetention), Limit: s.cfg.SweepBatch}
	swept := 0
	for {
		r, err := ts.SweepTokens(ctx, p)
		if err != nil {
			return fmt.Errorf("idem: sweep tokens: %w", err)
		}
		swept += r.Deleted
		p.After = r.Next
		if r.Next == nil {
			if swept > 0 {
				s.log.InfoContext(ctx, "swept unclaimed dedup tokens", "tokens", swept, "minted_before", p.MintedBefore)
			}
			return nil
		}
	}
}

// sweepRetries deletes the retries whose next attempt is older than
// Config.Retention, in batches, when the store can (store.RetrySweeper):
// a message its transport dropped (a TTL, a trimmed stream, a purge)
// leaves a retry that no commit clears.
func (s *sweeper) sweepRetries(ctx context.Context) error {
	rs := s.caps.retrySweeper
	if rs == nil {
		return nil
	}
	p := &store.StaleRetries{NextAttemptBefore: s.cfg.Clock().Add(-s.cfg.Retention), Limit: s.cfg.SweepBatch}
	swept := 0
	for {
		n, err := rs.SweepRetries(ctx, p)
		swept += n
		if err != nil {
			return fmt.Errorf("idem: sweep retries: %w", err)
		}
		if n < p.Limit {
			if swept > 0 {
				s.log.InfoContext(ctx, "swept retries whose message never came back", "retries", swept, "next_attempt_before", p.NextAttemptBefore)
			}
			return nil
		}
	}
}

// sweepCounters deletes, in batches of Config.SweepBatch, the
// flow-control counters that no decision needs (no live hold, a full
// bucket or none, unused for Config.LimitCounterIdle) and the expired
// holds, when the store can (store.Limiter). Each batch starts after the
// counters the previous one read.
func (s *sweeper) sweepCounters(ctx context.Context) error {
	l := s.caps.limiter
	if l == nil {
		return nil
	}
	p := &store.CounterSweepParams{Idle: s.cfg.LimitCounterIdle, Limit: s.cfg.SweepBatch}
	var total store.CounterSweep
	for {
		r, err := l.SweepCounters(ctx, p)
		if err != nil {
			return fmt.Errorf("idem: sweep flow-control counters: %w", err)
		}
		total.Counters += r.Counters
		total.Holds += r.Holds
		p.After = r.Next
		if r.Next == nil && r.Holds < p.Limit {
			if total.Counters+total.Holds > 0 {
				s.log.InfoContext(ctx, "swept idle flow-control counters and expired holds", "counters", total.Counters, "holds", total.Holds)
			}
			return nil
		}
	}
}

// forgetDeclarations deletes the limits' declarations that no running
// engine refreshed for s.forgetAfter, when the store keeps limits
// (store.Limiter.ForgetDeclarations): a limit removed from the code stops
// being shown as declared. Overrides stay, and holds taken under a
// forgotten limit are released as before; an engine that declares it
// again (a rollback) brings it back.
func (s *sweeper) forgetDeclarations(ctx context.Context) error {
	l := s.caps.limiter
	if l == nil {
		return nil
	}
	n, err := l.ForgetDeclarations(ctx, s.forgetAfter)
	if err != nil {
		return fmt.Errorf("idem: forget stale limit declarations: %w", err)
	}
	if n > 0 {
		s.log.InfoContext(ctx, "forgot limit declarations no running engine refreshed", "declarations", n, "older_than", s.forgetAfter)
	}
	return nil
}

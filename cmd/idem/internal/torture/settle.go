package torture

import (
	"context"
	"fmt"
	"time"
)

// settlePoll is how often settling counts what is in flight.
const settlePoll = 200 * time.Millisecond

// settle waits until the run has settled (docs/reliability.md, "When a run
// has settled"): the workers keep running (restarted if they die) until
// nothing has been in flight for a quiet window, then they stop, and
// nothing may be left once they are gone; if something is, they start
// again. A run that does not settle within Settle gets a problem.
func (r *driver) settle(ctx context.Context) error {
	quiet := time.Second
	if r.o.Transport != "" {
		// Longer than a lease: a delivery a stalled or dead worker holds,
		// which a broker may not count, is requeued within it.
		quiet = workerLease + time.Second
	}
	settleBy := time.Now().Add(r.o.Settle)
	for round := 1; ; round++ {
		left, err := r.quietFor(ctx, quiet, false, settleBy)
		if err != nil {
			return err
		}
		if left != 0 {
			r.rep.Problems = append(r.rep.Problems, fmt.Sprintf("not settled after %s: %d messages and timers still in flight", r.o.Settle, left))
			return r.workers.stop(ctx)
		}
		if err := r.workers.stop(ctx); err != nil {
			return err
		}
		// Nobody consumes now: whatever a worker held unacknowledged is
		// back in the broker's count (RabbitMQ requeues a closed
		// connection's deliveries, JetStream counts them pending), so a
		// count of zero over a second is everything.
		if left, err = r.quietFor(ctx, time.Second, true, settleBy); err != nil {
			return err
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(settleBy) {
			r.rep.Problems = append(r.rep.Problems, fmt.Sprintf("not settled after %s: %d messages and timers left once the workers stopped", r.o.Settle, left))
			return nil
		}
		r.logf("settle round %d: %d messages or timers left once the workers stopped; starting them again", round, left)
		if err := r.workers.restart(); err != nil {
			return err
		}
	}
}

// quietFor polls the backlog until it has been 0 for d; it returns the
// last count, which is not 0 when settleBy passed first or, with eager, as
// soon as the count is not 0 (-1: never counted).
func (r *driver) quietFor(ctx context.Context, d time.Duration, eager bool, settleBy time.Time) (int, error) {
	var since time.Time // when the backlog was last seen non-zero
	left := -1
	logged := "" // the error last logged: a server recovering repeats it every poll
	for {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case ev := <-r.workers.exits:
			if err := r.workers.handleExit(ev); err != nil {
				return 0, err
			}
			since = time.Time{}
			continue
		case <-time.After(settlePoll): // polling the database and broker with a deadline
		}
		n, err := r.backlog(ctx)
		switch {
		case err != nil:
			if err.Error() != logged {
				logged = err.Error()
				r.logf("settle: %v (logged once while it repeats)", err) // a restarting server
			}
			since = time.Time{}
		case n > 0 && eager:
			return n, nil
		case n > 0:
			left, since = n, time.Time{}
		case since.IsZero():
			left, since = 0, time.Now()
		case time.Since(since) >= d:
			return 0, nil
		}
		if time.Now().After(settleBy) {
			return left, nil
		}
	}
}

// backlog counts what is in flight in the store and, with a broker, what
// the broker holds.
func (r *driver) backlog(ctx context.Context) (int, error) {
	n, err := inFlight(ctx, r.db, r.o.Transport == "")
	if err != nil || r.broker == nil {
		return n, err
	}
	ready, unacked, err := r.broker.Pending(ctx)
	if err != nil {
		return 0, fmt.Errorf("count the broker's backlog: %w", err)
	}
	return n + ready + unacked, nil
}

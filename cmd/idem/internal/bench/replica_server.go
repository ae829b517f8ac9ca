package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// serverMeter measures what a phase asked of the PostgreSQL server: its
// transactions on the database, its WAL and its processes' CPU.
type serverMeter struct {
	xacts0, wal0 int64
	cpu          *cpuMeter
}

// serverCounters reads the database's committed and rolled-back
// transactions and the server's WAL bytes (0 before PostgreSQL 15).
func serverCounters(ctx context.Context, pool *pgxpool.Pool) (xacts, wal int64, err error) {
	err = pool.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&xacts)
	if err != nil {
		return 0, 0, fmt.Errorf("read pg_stat_database: %w", err)
	}
	if pool.QueryRow(ctx, `SELECT wal_bytes::bigint FROM pg_stat_wal`).Scan(&wal) != nil {
		wal = 0
	}
	return xacts, wal, nil
}

func startServerMeter(ctx context.Context, pool *pgxpool.Pool) (*serverMeter, error) {
	if _, err := flushStats(ctx, pool); err != nil {
		return nil, err
	}
	m := &serverMeter{}
	var err error
	if m.xacts0, m.wal0, err = serverCounters(ctx, pool); err != nil {
		return nil, err
	}
	if m.cpu, err = startCPU(ctx, pool); err != nil {
		return nil, err
	}
	return m, nil
}

// finish waits for the replicas' backends to end (a backend publishes its
// statistics as it exits), reads the counters again and sets run's
// transactions and WAL bytes per delivery. own is the sweep's own queries
// since startServerMeter, taken out of the transactions.
func (m *serverMeter) finish(ctx context.Context, pool *pgxpool.Pool, run *ReplicaRun, own int64, deliveries int) error {
	_, settleQueries, err := settle(ctx, pool)
	if err != nil {
		return err
	}
	flushed, err := flushStats(ctx, pool)
	if err != nil {
		return err
	}
	xacts, wal, err := serverCounters(ctx, pool)
	if err != nil {
		return err
	}
	// Our own: startCPU's and the first reading's second query, the
	// sampler's queries, settle's, the flushes, and this reading's first.
	own += 2 + settleQueries + int64(flushed) + 1
	n := float64(deliveries)
	run.Transactions = float64(xacts-m.xacts0-own) / n
	if wal > 0 {
		run.WALBytes = float64(wal-m.wal0) / n
	}
	return nil
}

// sampled is what waitSettled saw of a phase.
type sampled struct {
	queries int64 // the sweep's queries on the server
}

// waitSettled polls the phase's schema until every delivery of its
// workload is settled (an inbox record per distinct message and, on the
// store's queue, an empty queue), sampling the server's connections, wait
// events and lock waits into run (nil: not sampled).
func (s *sweep) waitSettled(ctx context.Context, p *phase, broker bool, run *ReplicaRun) (*sampled, error) {
	ctx, cancel := context.WithTimeout(ctx, s.o.Timeout)
	defer cancel()
	tick := time.NewTicker(sampleEvery)
	defer tick.Stop()
	smp := &sampled{}
	pool := p.st.Pool()
	for {
		var inbox, queued int
		smp.queries++
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM idem_inbox), (SELECT count(*) FROM idem_queue)`).Scan(&inbox, &queued); err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("not settled after %s: %d of %d messages applied, %d deliveries queued (raise --timeout)", s.o.Timeout, inbox, p.w.Distinct, queued)
			}
			return nil, fmt.Errorf("poll the phase: %w", err)
		}
		if inbox == p.w.Distinct && (broker || queued == 0) {
			return smp, nil
		}
		if run != nil {
			if err := s.sample(ctx, pool, run); err != nil {
				return nil, err
			}
			smp.queries += 2
		}
		select {
		case <-ctx.Done():
			if ctx.Err() == context.DeadlineExceeded {
				return nil, fmt.Errorf("not settled after %s: %d of %d messages applied, %d deliveries queued (raise --timeout)", s.o.Timeout, inbox, p.w.Distinct, queued)
			}
			return nil, ctx.Err()
		case <-tick.C:
		}
	}
}

// sample notes the database's client backends, its active ones by wait
// event, and the ungranted locks.
func (s *sweep) sample(ctx context.Context, pool *pgxpool.Pool, run *ReplicaRun) error {
	rows, err := pool.Query(ctx, `SELECT coalesce(wait_event_type || ':' || wait_event, 'CPU'), coalesce(state = 'active', false), count(*)
		FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()
		GROUP BY 1, 2`)
	if err != nil {
		return fmt.Errorf("sample pg_stat_activity: %w", err)
	}
	defer rows.Close()
	conns := 0
	if run.WaitEvents == nil {
		run.WaitEvents = map[string]int{}
	}
	for rows.Next() {
		var event string
		var active bool
		var n int
		if err := rows.Scan(&event, &active, &n); err != nil {
			return fmt.Errorf("sample pg_stat_activity: %w", err)
		}
		conns += n
		if active {
			run.WaitEvents[event] += n
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sample pg_stat_activity: %w", err)
	}
	run.Connections = max(run.Connections, conns)
	var waits int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&waits); err != nil {
		return fmt.Errorf("sample pg_locks: %w", err)
	}
	run.LockWaits = max(run.LockWaits, waits)
	run.Samples++
	return nil
}

// latency runs the latency phase of run: run.Replicas replicas on a fresh
// schema, a producer publishing at rate deliveries per second, and the
// time from each publish to the commit that consumed it.
func (s *sweep) latency(ctx context.Context, run *ReplicaRun, b *ReplicaBroker, rate float64) error {
	warm := int(rate * s.o.LatencyWarmup.Seconds())
	n := warm + max(100, int(rate*s.o.LatencyDuration.Seconds()))
	w := NewWorkload(n, s.o.Keys, s.o.Dup, s.o.Seed+1, "l-")
	p, err := s.open(ctx, b, w, "l-", s.o.Seed+1)
	if err != nil {
		return err
	}
	defer p.close()
	run.LatencyRate, run.LatencyMessages = rate, n
	f, err := s.startFleet(ctx, run.Replicas, s.args(p, b))
	if err != nil {
		return err
	}
	defer f.kill()
	if err := f.start(); err != nil {
		return err
	}
	if err := s.settle(ctx, p, run.Replicas); err != nil {
		return err
	}
	published, err := pace(ctx, p, rate)
	if err != nil {
		return err
	}
	if _, err := s.waitSettled(ctx, p, b != nil, nil); err != nil {
		return err
	}
	snaps, err := f.stop(ctx)
	if err != nil {
		return err
	}
	_, first := merge(snaps, n)
	var lat []time.Duration
	for i := warm; i < n; i++ {
		if first[i] != 0 && !published[i].IsZero() {
			lat = append(lat, time.Unix(0, first[i]).Sub(published[i]))
		}
	}
	run.P50Ms, run.P99Ms = ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99))
	for _, x := range snaps {
		run.LatencyConflicts += x.Conflicts
	}
	return s.check(ctx, p, run, snaps, "latency phase: ")
}

// pace publishes p's workload at rate deliveries per second, every
// publishEvery, and returns when each delivery's publish returned.
func pace(ctx context.Context, p *phase, rate float64) ([]time.Time, error) {
	envs := p.w.Envelopes(time.Time{})
	n := len(envs)
	published := make([]time.Time, n)
	tick := time.NewTicker(publishEvery)
	defer tick.Stop()
	start := time.Now()
	for sent := 0; sent < n; {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-tick.C:
		}
		due := min(n, int(time.Since(start).Seconds()*rate)+1)
		if due <= sent {
			continue
		}
		now := time.Now()
		for i := sent; i < due; i++ {
			envs[i].SentAt = now
		}
		if err := p.pub.Publish(ctx, envs[sent:due]); err != nil {
			return nil, fmt.Errorf("publish: %w", err)
		}
		at := time.Now()
		for i := sent; i < due; i++ {
			published[i] = at
		}
		sent = due
	}
	return published, nil
}

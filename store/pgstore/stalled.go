package pgstore

import (
	"context"
	"strconv"
	"time"
)

// A partition between a replica and PostgreSQL in the middle of a unit of
// work leaves the replica's server session inside its transaction, holding
// the row locks of the sagas it wrote and the queue rows it claimed, and
// waiting for the rest of the pipeline (COMMIT, Sync). In the extended
// protocol, between an Execute and the Sync, neither statement_timeout nor
// idle_in_transaction_session_timeout runs, and PostgreSQL 15 has no
// transaction_timeout: only TCP notices, after hours by default. Two
// bounds end such a session:
//
//   - Open sets the session's TCP keepalives and tcp_user_timeout from
//     Config.Lease (sessionParams), which end it when the network drops
//     packets (a real partition: no ACK, no keepalive answer);
//   - every store that runs units of work looks, every stalledEvery, for
//     sessions of its application (application_name), role and database
//     that have waited on their client in the middle of a pipeline inside
//     a transaction for longer than Config.Lease, and ends them
//     (endStalled). This also holds when
//     something between keeps the TCP connection alive (a proxy or a
//     load balancer that stops forwarding), which TCP cannot see.
//
// Ending the session rolls its transaction back: the claim's rows come
// back, the other replicas' units of work on the same sagas go on, and the
// partitioned replica's commit fails when its connection does.

// endStalledSQL ends the sessions of this application, role and database
// that have sat in the middle of a pipeline inside a transaction (state
// active: no Sync received since the last statement ran) waiting on their
// client (wait_event ClientRead) for longer than $1 seconds. Idem sends a
// pipeline in one write, so only a client cut off mid-write is there;
// sessions idle in a transaction are left to
// idle_in_transaction_session_timeout (a claim sets it to Lease; a unit of
// work that claimed nothing writes only in its commit's pipeline). A pool
// without an application_name ends nothing. A session of the same role may be signalled without privileges
// (pg_signal_backend covers others); sessions of other roles are not even
// seen without pg_read_all_stats.
const endStalledSQL = `
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)), current_setting('application_name')
FROM pg_stat_activity
WHERE datname = current_database() AND usename = current_user
  AND application_name = current_setting('application_name') AND application_name <> ''
  AND pid <> pg_backend_pid() AND backend_type = 'client backend'
  AND xact_start IS NOT NULL AND state = 'active' AND wait_event = 'ClientRead'
  AND state_change < now() - make_interval(secs => $1)`

// stalledEvery is how often a store looks for stalled sessions: a quarter
// of the lease, at least a second. A stalled session ends at most Lease
// plus this after it stalled.
func (s *Store) stalledEvery() time.Duration {
	return max(s.cfg.Lease/4, time.Second)
}

// sessionParams are the session settings Open gives every connection so
// that the server notices a partition within about Lease on its own: TCP
// keepalives that start after a third of the lease of silence and give up
// after three unanswered probes, and a TCP user timeout of one lease (at
// least 10s) for unacknowledged data. Linux also applies the user timeout
// to a client that stops reading: the floor keeps a short test lease from
// dropping a connection whose client was only descheduled.
func sessionParams(lease time.Duration) map[string]string {
	secs := max(int64(lease/time.Second), 3)
	return map[string]string{
		"tcp_keepalives_idle":     strconv.FormatInt(max(secs/3, 1), 10),
		"tcp_keepalives_interval": strconv.FormatInt(max(secs/9, 1), 10),
		"tcp_keepalives_count":    "3",
		"tcp_user_timeout":        strconv.FormatInt(max(lease, 10*time.Second).Milliseconds(), 10),
	}
}

// StartupParameters returns the names of the startup parameters Open
// sets on every connection, besides those pgx always sends: a connection
// pooler in between must accept or ignore them.
func StartupParameters() []string {
	return []string{"search_path", "application_name", "tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count", "tcp_user_timeout"}
}

// watchStalled starts, once, the loop that ends stalled sessions; it runs
// until Close.
func (s *Store) watchStalled() {
	s.stalledOnce.Do(func() {
		s.lmu.Lock() // Close waits for lwg after taking lmu
		defer s.lmu.Unlock()
		if s.closed.Load() {
			return
		}
		s.lwg.Add(1)
		go func() {
			defer s.lwg.Done()
			t := time.NewTicker(s.stalledEvery())
			defer t.Stop()
			for {
				select {
				case <-s.bg.Done():
					return
				case <-t.C:
				}
				s.endStalled(s.bg)
			}
		}()
	})
}

// endStalled ends the stalled sessions of this store's application once,
// and logs how many.
func (s *Store) endStalled(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.stalledEvery())
	defer cancel()
	var app string
	var n int64
	err := s.pool.QueryRow(ctx, endStalledSQL, s.cfg.Lease.Seconds()).Scan(&n, &app)
	switch {
	case err != nil && ctx.Err() == nil && s.bg.Err() == nil:
		s.log.Debug("looking for stalled sessions failed", "error", redact(err))
	case n > 0:
		s.log.Warn("ended PostgreSQL sessions that had waited on their client in the middle of a commit for longer than the lease (a replica cut off by the network); their transactions are rolled back",
			"sessions", n, "application_name", app, "lease", s.cfg.Lease)
	}
}

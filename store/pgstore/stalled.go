package pgstore

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
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
//   - Open sets the session's TCP keepalives from Config.Lease
//     (sessionParams), which end it when the network drops packets (a
//     real partition: no keepalive answer);
//   - every store that runs units of work looks, every stalledEvery, for
//     sessions of its deployment (its application_name, role and
//     database, holding a lock on a table of its schema) that wait on
//     their client in the middle of a pipeline inside a transaction, and
//     ends those it has seen in that same wait, with nothing sent by the
//     client since, for at least Config.Lease (endStalled). This also
//     holds when something between keeps the TCP connection alive (a
//     proxy or a load balancer that stops forwarding), which TCP cannot
//     see.
//
// Ending the session rolls its transaction back: the claim's rows come
// back, the other replicas' units of work on the same sagas go on, and the
// partitioned replica's commit fails when its connection does.

// stalledSQL lists the sessions of this deployment that sit in the middle
// of a pipeline inside a transaction (state active: no Sync received since
// the last statement ran) waiting on their client (wait_event ClientRead):
// those of this application_name, role and database that hold a lock on a
// table of schema $1. The schema keeps out other deployments sharing the
// server, the role and the application name. A COPY … FROM STDIN waits on
// its client for as long as the client feeds it, and is left alone.
// state_change is when the session's last statement (or protocol message)
// started, not when its wait began: a statement that ran long and a client
// that has not sent the rest yet look old at once. So endStalled ends a
// session only when it has seen the same wait, the same state_change, for
// a lease. Idem sends a pipeline in one write, so only a client cut off
// mid-write stays there; sessions idle in a transaction are left to
// idle_in_transaction_session_timeout (a claim sets it to Lease; a unit of
// work that claimed nothing writes only in its commit's pipeline). A pool
// without an application_name is not watched. A session of the same role
// may be signalled without privileges (pg_signal_backend covers others);
// sessions of other roles are not even seen without pg_read_all_stats.
const stalledSQL = `
SELECT a.pid, a.backend_start, a.xact_start, a.state_change
FROM pg_stat_activity a
WHERE a.datname = current_database() AND a.usename = current_user
  AND a.application_name = current_setting('application_name') AND a.application_name <> ''
  AND a.pid <> pg_backend_pid() AND a.backend_type = 'client backend'
  AND a.xact_start IS NOT NULL AND a.state = 'active' AND a.wait_event = 'ClientRead'
  AND a.query !~* '^\s*copy\M'
  AND EXISTS (
    SELECT FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
    WHERE l.pid = a.pid AND l.granted
      AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
      AND c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = $1))`

// endStalledSQL ends the session $1 if it is still in the wait endStalled
// saw: same session, transaction and state_change, still waiting on its
// client.
const endStalledSQL = `
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
FROM pg_stat_activity
WHERE pid = $1 AND backend_start = $2 AND xact_start = $3 AND state_change = $4
  AND state = 'active' AND wait_event = 'ClientRead'`

// stallSeen is one wait of a session on its client, as stalledSQL lists
// it: while it stays the same, the client has sent nothing.
type stallSeen struct {
	pid                                   int32
	backendStart, xactStart, stateChanged time.Time
}

// stalledEvery is how often a store looks for stalled sessions: a quarter
// of the lease, at least a second. A stalled session ends at most Lease
// plus twice this after it stalled.
func (s *Store) stalledEvery() time.Duration {
	return max(s.cfg.Lease/4, time.Second)
}

// userTimeoutFloor is the smallest TCP user timeout Open sets.
const userTimeoutFloor = 2 * time.Minute

// sessionParams are the session settings Open gives every connection so
// that the server notices a partition within about Lease on its own: TCP
// keepalives that start after a third of the lease of silence and give up
// after three unanswered probes. The client's kernel answers them however
// slowly the client reads. The TCP user timeout, which bounds data left
// unacknowledged, is four leases and at least two minutes: Linux applies it
// also to a client that stops reading (a full receive window), so at one
// lease it dropped a connection whose client paused a large result.
func sessionParams(lease time.Duration) map[string]string {
	secs := max(int64(lease/time.Second), 3)
	return map[string]string{
		"tcp_keepalives_idle":     strconv.FormatInt(max(secs/3, 1), 10),
		"tcp_keepalives_interval": strconv.FormatInt(max(secs/9, 1), 10),
		"tcp_keepalives_count":    "3",
		"tcp_user_timeout":        strconv.FormatInt(max(4*lease, userTimeoutFloor).Milliseconds(), 10),
	}
}

// ApplicationName returns the application_name Open gives the connections
// of a store on schema, "idem/" and the schema, so that an operator can
// tell deployments apart in pg_stat_activity. A schema that is not
// printable ASCII or would not fit PostgreSQL's 63 bytes is shortened and
// its printable-ASCII prefix followed by a hash of the whole name. A pool
// given to New may use it too: the replicas of a deployment need the same
// application_name for their stores to end each other's stalled sessions.
func ApplicationName(schema string) string {
	const prefix, maxLen = "idem/", 63
	clean := strings.Map(func(r rune) rune {
		if r < 0x20 || r > 0x7e {
			return -1
		}
		return r
	}, schema)
	if clean == schema && len(prefix)+len(schema) <= maxLen {
		return prefix + schema
	}
	sum := sha256.Sum256([]byte(schema))
	tag := "#" + hex.EncodeToString(sum[:6])
	return prefix + clean[:min(len(clean), maxLen-len(prefix)-len(tag))] + tag
}

// StartupParameters returns the names of the startup parameters Open
// sets on every connection to PostgreSQL, besides those pgx always sends.
// PgBouncer refuses all but application_name: through it Open sets only
// that one (see pooler.go).
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

// endStalled looks once for the stalled sessions of this store's
// deployment, ends those it has seen in the same wait for at least a
// lease, and logs how many.
func (s *Store) endStalled(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, s.stalledEvery())
	defer cancel()
	s.smu.Lock()
	defer s.smu.Unlock()
	seen, err := s.stalledNow(ctx)
	if err != nil {
		if ctx.Err() == nil && s.bg.Err() == nil {
			s.log.Debug("looking for stalled sessions failed", "error", redact(err))
		}
		return
	}
	now := time.Now()
	first := make(map[stallSeen]time.Time, len(seen))
	var n int64
	for _, w := range seen {
		since, ok := s.stalls[w]
		if !ok {
			since = now
		}
		if now.Sub(since) < s.cfg.Lease {
			first[w] = since
			continue
		}
		var ended int64
		err := s.pool.QueryRow(ctx, endStalledSQL, w.pid, w.backendStart, w.xactStart, w.stateChanged).Scan(&ended)
		if err != nil {
			first[w] = since // try again next time
			continue
		}
		n += ended
	}
	s.stalls = first
	if n > 0 {
		s.log.Warn("ended PostgreSQL sessions that had waited on their client in the middle of a commit for longer than the lease (a replica cut off by the network); their transactions are rolled back",
			"sessions", n, "schema", s.cfg.Schema, "lease", s.cfg.Lease)
	}
}

// stalledNow lists the sessions of this deployment waiting on their
// client mid-pipeline (stalledSQL).
func (s *Store) stalledNow(ctx context.Context) ([]stallSeen, error) {
	rows, err := s.pool.Query(ctx, stalledSQL, s.cfg.Schema)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (stallSeen, error) {
		var w stallSeen
		err := r.Scan(&w.pid, &w.backendStart, &w.xactStart, &w.stateChanged)
		return w, err
	})
}

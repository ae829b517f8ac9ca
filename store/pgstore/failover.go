package pgstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
)

// A failover, as pgstore meets it (docs/operations.md, PostgreSQL,
// "Failover"):
//
//   - Open connects only to a server that accepts writes: unless the
//     connection string says otherwise, it sets target_session_attrs to
//     read-write, so that of the hosts of a multi-host URL
//     (postgres://u@h1:5432,h2:5432/db) pgx picks the primary, and a
//     single host that is read-only is refused when connecting;
//   - a session that meets SQLSTATE 25006 (read_only_sql_transaction) is
//     on a server that is no longer the primary: a fenced primary
//     (default_transaction_read_only on, its sessions left open), or one
//     demoted to a standby. The error is translated to store.ErrReadOnly,
//     and the store drops every session it opened before (sessionWatch):
//     the idle ones at once (pgxpool's Reset), the busy ones when they are
//     released, and those still held after staleGrace (the queue listener,
//     in the pool or over Config.DirectURL, which would otherwise wait for
//     notifications on the old primary for ever) by closing their socket.
//     New sessions connect again, and target_session_attrs picks the new
//     primary;
//   - a unit of work whose commit outcome was lost with its session is
//     read back by the engine, as after any lost connection.
//
// Through a connection pooler the server sessions are the pooler's: a
// 25006 is translated to store.ErrReadOnly, but only the pooler can leave
// the old primary (docs/operations.md, "Through PgBouncer").

// staleGrace is how long a session opened before a failover was detected
// may stay checked out (a unit of work finishing, which fails on the
// read-only server anyway) before its socket is closed.
const staleGrace = 2 * time.Second

// sessionWatch tracks the pool's sessions and the generation each was
// opened in; a 25006 seen on a session of the current generation starts
// a new one and drops the older sessions. It is safe for concurrent use.
type sessionWatch struct {
	log  *slog.Logger
	pool atomic.Pointer[pgxpool.Pool]
	gen  atomic.Int64
	done <-chan struct{} // closed when the store closes

	mu    sync.Mutex
	conns map[*pgx.Conn]int64 // open sessions and their generation
}

func newSessionWatch(log *slog.Logger, done <-chan struct{}) *sessionWatch {
	return &sessionWatch{log: log, done: done, conns: map[*pgx.Conn]int64{}}
}

// hook installs the watch on a pool's configuration: it records each
// session opened and closed.
func (w *sessionWatch) hook(pc *pgxpool.Config) {
	after, before := pc.AfterConnect, pc.BeforeClose
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		if after != nil {
			if err := after(ctx, c); err != nil {
				return err
			}
		}
		w.mu.Lock()
		w.conns[c] = w.gen.Load()
		w.mu.Unlock()
		return nil
	}
	pc.BeforeClose = func(c *pgx.Conn) {
		w.mu.Lock()
		delete(w.conns, c)
		w.mu.Unlock()
		if before != nil {
			before(c)
		}
	}
}

// track registers a session the store opened outside its pool (the queue
// listener's over Config.DirectURL), so that a failover closes it as it
// closes the pool's sessions still held; the returned func forgets it,
// before the caller closes it.
func (w *sessionWatch) track(c *pgx.Conn) func() {
	w.mu.Lock()
	w.conns[c] = w.gen.Load()
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.conns, c)
		w.mu.Unlock()
	}
}

// saw is told of every statement's error on session c (the tracer's).
func (w *sessionWatch) saw(c *pgx.Conn, err error) {
	if !isReadOnly(err) {
		return
	}
	w.mu.Lock()
	g, ok := w.conns[c]
	w.mu.Unlock()
	if !ok || !w.gen.CompareAndSwap(g, g+1) {
		return // a session already dropped, or another saw it first
	}
	pool := w.pool.Load()
	if pool == nil {
		return
	}
	w.log.Warn("the database refuses writes (SQLSTATE 25006): the server is no longer the primary; dropping the store's sessions there and connecting again (target_session_attrs picks the primary)",
		"host", c.PgConn().Conn().RemoteAddr().String())
	pool.Reset()
	go w.closeStale(g + 1)
}

// closeStale closes, after staleGrace, the sockets of the sessions opened
// before generation gen that are still checked out.
func (w *sessionWatch) closeStale(gen int64) {
	t := time.NewTimer(staleGrace)
	defer t.Stop()
	select {
	case <-w.done:
		return
	case <-t.C:
	}
	w.mu.Lock()
	var stale []*pgx.Conn
	for c, g := range w.conns {
		if g < gen {
			stale = append(stale, c)
		}
	}
	for _, c := range stale {
		delete(w.conns, c) // a session the pool no longer holds (hijacked) is never closed by it
	}
	w.mu.Unlock()
	for _, c := range stale {
		// Closing the socket is safe while another goroutine uses the
		// session: its next read or write fails, and the pool drops it.
		_ = c.PgConn().Conn().Close()
	}
	if len(stale) > 0 {
		w.log.Warn("closed sessions still held on the server that refused writes", "sessions", len(stale))
	}
}

// isReadOnly reports whether err is PostgreSQL's read_only_sql_transaction
// (SQLSTATE 25006): a write on a read-only server.
func isReadOnly(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "25006"
}

// targetReadWrite makes pc connect only to a server that accepts writes
// (target_session_attrs=read-write, as libpq names it), unless connString
// or PGTARGETSESSIONATTRS chose otherwise.
func targetReadWrite(pc *pgxpool.Config, connString string) {
	connReadWrite(pc.ConnConfig, connString)
}

// connReadWrite is targetReadWrite for a connection of its own (the
// migrations' and the queue listener's over Config.DirectURL).
func connReadWrite(cc *pgx.ConnConfig, connString string) {
	if strings.Contains(connString, "target_session_attrs") || os.Getenv("PGTARGETSESSIONATTRS") != "" {
		return
	}
	cc.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
}

// readOnlyError explains an Open that found no server accepting writes
// at addr (target_session_attrs=read-write), or returns nil.
func readOnlyError(err error, addr string) error {
	if !errors.Is(err, pgconn.ErrReadOnlyConnection) {
		return nil
	}
	return fmt.Errorf("pgstore: %w: no server at %s accepts writes (%v): pgstore connects only to the primary (target_session_attrs=read-write unless the connection string sets it); "+
		"list every node of the cluster (postgres://user@host1:5432,host2:5432/db) so that the primary is found wherever it is, or wait for the failover to end", store.ErrReadOnly, addr, redact(err))
}

// ErrAsyncReplication is returned by Open when Config.RequireSyncReplication
// is set and the primary acknowledges commits before a standby has them.
var ErrAsyncReplication = errors.New("postgresql replicates commits asynchronously")

// checkReplication warns, or refuses under Config.RequireSyncReplication,
// a primary whose acknowledged commits a failover may lose: one that
// replicates asynchronously (synchronous_standby_names empty, or
// synchronous_commit local). The warning needs standbys it can see
// (pg_stat_replication); the refusal does not.
func (s *Store) checkReplication(ctx context.Context) error {
	var standbys int
	var names, commit string
	err := s.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stat_replication), current_setting('synchronous_standby_names'), current_setting('synchronous_commit')`).
		Scan(&standbys, &names, &commit)
	if err != nil {
		return fmt.Errorf("pgstore: check replication: %w", translate(err))
	}
	if strings.TrimSpace(names) != "" && commit != "local" && commit != "off" {
		return nil
	}
	const fix = "set synchronous_standby_names (for example 'ANY 1 (*)') with synchronous_commit on, or, under Patroni, synchronous_mode: true"
	if s.cfg.RequireSyncReplication {
		return fmt.Errorf("pgstore: %w (synchronous_standby_names=%q, synchronous_commit=%s, %d standbys): a failover would lose the commits a standby had not received; %s, or unset Config.RequireSyncReplication",
			ErrAsyncReplication, names, commit, standbys, fix)
	}
	if standbys > 0 {
		s.log.Warn("PostgreSQL replicates to its standbys asynchronously: a failover to a standby can lose commits Idem was told were durable (messages consumed, state, emissions); "+fix,
			"standbys", standbys, "synchronous_standby_names", names, "synchronous_commit", commit)
	}
	return nil
}

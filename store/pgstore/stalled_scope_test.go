package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store/pgstore"
)

// session is a server session of a store's deployment, opened beside the
// store with the application_name its pool uses, that the test drives by
// hand.
type session struct {
	conn *pgx.Conn
	pid  uint32
}

// sessionOf opens a session with the application_name of s's connections.
func sessionOf(t *testing.T, s *pgstore.Store) *session {
	t.Helper()
	ctx := context.Background()
	var app string
	if err := s.Pool().QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&app); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = app
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return &session{conn: c, pid: c.PgConn().PID()}
}

// stallIn sends, without a Sync, a pipeline that begins a transaction,
// reads a table of schema (taking a lock on it) and runs then, and leaves
// the pipeline open: the server waits on its client in the middle of it,
// as for a replica cut off mid-commit.
func (ss *session) stallIn(t *testing.T, schema, then string) *pgconn.Pipeline {
	t.Helper()
	p := ss.conn.PgConn().StartPipeline(context.Background())
	p.SendQueryParams(`BEGIN`, nil, nil, nil, nil)
	p.SendQueryParams(`SELECT count(*) FROM `+pgx.Identifier{schema, "idem_instances"}.Sanitize(), nil, nil, nil, nil)
	p.SendQueryParams(then, nil, nil, nil, nil)
	if err := p.Flush(); err != nil {
		t.Fatal(err)
	}
	return p
}

// finish sends the pipeline's Sync and reads its three results: it fails
// when the session was ended meanwhile.
func finish(p *pgconn.Pipeline) error {
	if err := p.Sync(); err != nil {
		return err
	}
	for range 3 {
		res, err := p.GetResults()
		if err != nil {
			return err
		}
		rr, ok := res.(*pgconn.ResultReader)
		if !ok {
			return fmt.Errorf("pipeline result %T, want a result reader", res)
		}
		if _, err := rr.Close(); err != nil {
			return err
		}
	}
	if _, err := p.GetResults(); err != nil { // the Sync
		return err
	}
	return p.Close()
}

// alive reports whether the session with pid is still on the server.
func alive(t *testing.T, obs *pgx.Conn, pid uint32) bool {
	t.Helper()
	var n int
	if err := obs.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, int64(pid)).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// waitClientRead waits until the session with pid is active and waits on
// its client, in the middle of a pipeline.
func waitClientRead(t *testing.T, obs *pgx.Conn, pid uint32) {
	t.Helper()
	enginetest.WaitFor(t, 30*time.Second, "the session to wait on its client mid-pipeline", func() (bool, error) {
		var n int
		err := obs.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE pid = $1 AND state = 'active' AND wait_event = 'ClientRead'`, int64(pid)).Scan(&n)
		return n == 1, err
	})
}

// blockingSource is a pgx.CopyFromSource that gives one row, then waits
// until release is closed before it ends: a COPY that the client is still
// feeding.
type blockingSource struct {
	sent    bool
	release chan struct{}
}

func (b *blockingSource) Next() bool {
	if b.sent {
		<-b.release
		return false
	}
	b.sent = true
	return true
}
func (b *blockingSource) Values() ([]any, error) { return []any{1}, nil }
func (b *blockingSource) Err() error             { return nil }

// A store's watchdog ends only the stalled sessions of its own deployment:
// not those of another deployment (another schema) on the same server and
// role, whatever its lease, and not its own deployment's COPY … FROM STDIN,
// which waits on its client for as long as the client feeds it. Both are
// looked at over the same passes that end a stalled session of its own.
func TestWatchdogEndsOnlyItsDeploymentsStalls(t *testing.T) {
	testenv.PostgresURL(t)
	a := openStore(t, pgstore.Config{Lease: time.Second})
	b := openStore(t, pgstore.Config{Lease: 30 * time.Second})
	ctx := context.Background()
	obs, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close(ctx)

	// A COPY in a's deployment, holding a lock on a's tables, whose client
	// has not sent all its rows yet.
	tx, err := a.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var copyPID int64
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM (SELECT count(*) FROM idem_instances) c`).Scan(&copyPID); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `CREATE TEMP TABLE bulk (n int) ON COMMIT DROP`); err != nil {
		t.Fatal(err)
	}
	src := &blockingSource{release: make(chan struct{})}
	copied := make(chan error, 1)
	go func() {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"bulk"}, []string{"n"}, src)
		copied <- err
	}()
	release := sync.OnceFunc(func() { close(src.release) })
	defer release()
	waitClientRead(t, obs, uint32(copyPID))

	// A session of b's deployment stalled mid-pipeline: b's business, after
	// b's lease, not a's.
	other := sessionOf(t, b)
	otherP := other.stallIn(t, b.Schema(), `SELECT 1`)
	waitClientRead(t, obs, other.pid)

	// A session of a's deployment stalled mid-pipeline: a's watchdog ends
	// it after a's lease.
	own := sessionOf(t, a)
	ownP := own.stallIn(t, a.Schema(), `SELECT 1`)
	waitClientRead(t, obs, own.pid)
	enginetest.WaitFor(t, 60*time.Second, "a's watchdog to end a's stalled session", func() (bool, error) {
		pgstore.EndStalled(ctx, a)
		return !alive(t, obs, own.pid), nil
	})
	_ = ownP.Close()

	if !alive(t, obs, other.pid) {
		t.Errorf("a stalled session of another deployment (schema %s, lease 30s) was ended by a store of schema %s (lease 1s)", b.Schema(), a.Schema())
	} else if err := finish(otherP); err != nil {
		t.Errorf("the other deployment's session, once its pipeline is synced: %v", err)
	}
	if !alive(t, obs, uint32(copyPID)) {
		t.Error("a COPY … FROM STDIN its client was still feeding was ended as a stalled session")
	}
	release()
	if err := <-copied; err != nil {
		t.Errorf("the COPY its client was still feeding: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Errorf("commit the COPY's transaction: %v", err)
	}
}

// A session whose last statement ran for longer than the lease and that
// then waits on its client (the next messages of its pipeline still on
// their way) has not been silent for a lease: state_change is when that
// statement started. The watchdog does not end it on sight.
func TestWatchdogDoesNotEndASessionAfterALongStatement(t *testing.T) {
	testenv.PostgresURL(t)
	const lease = time.Second
	a := openStore(t, pgstore.Config{Lease: lease})
	ctx := context.Background()
	obs, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close(ctx)

	// The statement runs for longer than the lease (as an UPDATE waiting on
	// a row lock does); the client then takes its time with the rest.
	ss := sessionOf(t, a)
	p := ss.stallIn(t, a.Schema(), fmt.Sprintf(`SELECT pg_sleep(%g)`, 1.5*lease.Seconds()))
	waitClientRead(t, obs, ss.pid)
	pgstore.EndStalled(ctx, a)
	if !alive(t, obs, ss.pid) {
		t.Fatal("a session that had waited on its client for less than the lease, after a statement that ran longer, was ended as stalled")
	}
	if err := finish(p); err != nil {
		t.Errorf("the session's pipeline, once synced: %v", err)
	}
}

// The TCP user timeout does not end a connection whose client only pauses
// reading a large result: it is minutes, not the lease. Keepalives, which
// the client's kernel answers however slowly the client reads, bound a
// partition within about the lease.
func TestSessionParamsLeaveRoomForSlowReaders(t *testing.T) {
	for _, tc := range []struct {
		lease       time.Duration
		userTimeout string
		idle        string
	}{
		{time.Second, "120000", "1"},
		{30 * time.Second, "120000", "10"},
		{time.Minute, "240000", "20"},
	} {
		p := pgstore.SessionParams(tc.lease)
		if p["tcp_user_timeout"] != tc.userTimeout || p["tcp_keepalives_idle"] != tc.idle {
			t.Errorf("lease %v: tcp_user_timeout %s ms, tcp_keepalives_idle %s s; want %s (four leases, at least two minutes) and %s",
				tc.lease, p["tcp_user_timeout"], p["tcp_keepalives_idle"], tc.userTimeout, tc.idle)
		}
	}
}

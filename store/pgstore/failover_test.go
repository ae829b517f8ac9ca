package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// failoverRig is an engine on pgstore over a PostgresPair's multi-host
// URL, fed increments by a publisher that retries through the failover.
type failoverRig struct {
	t    *testing.T
	pair *testenv.PgPair
	st   *pgstore.Store
	e    *idem.Engine
	want map[string]int
	pub  sync.WaitGroup
}

const failoverKeys, failoverPerKey = 30, 10

// newFailoverRig runs an engine on pair; with direct, the queue listens
// over Config.DirectURL (the same nodes), a session outside the pool.
func newFailoverRig(t *testing.T, pair *testenv.PgPair, direct ...bool) *failoverRig {
	r := &failoverRig{t: t, pair: pair, want: map[string]int{}}
	cfg := &pgstore.Config{Migrate: true, Lease: 5 * time.Second}
	if len(direct) > 0 && direct[0] {
		cfg.DirectURL = pair.URL()
	}
	st, err := pgstore.Open(context.Background(), pair.URL(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	r.st = st
	r.e = enginetest.NewEngine(t, st, st, &idem.Config{BatchSize: 8, Lanes: 2, Consumers: 1,
		ClaimLease: 2 * time.Second}) // a timer claimed on the lost primary fires again soon
	if err := r.e.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = r.e.Stop(ctx)
	})
	var envs []idem.Envelope
	for i := range failoverPerKey {
		for k := range failoverKeys {
			key := fmt.Sprintf("k-%03d", k)
			env, err := r.e.NewEnvelope(fmt.Sprintf("inc-%s-%d", key, i), enginetest.Inc{Key: key, N: i + 1})
			if err != nil {
				t.Fatal(err)
			}
			r.want[key] += i + 1
			envs = append(envs, env)
		}
	}
	for k := range r.want {
		r.want[k] += 1000 // the counter's timer
	}
	r.pub.Add(1)
	go r.publish(envs)
	return r
}

// publish publishes envs one by one, each until it is accepted: a publish
// whose outcome was lost is sent again under the same ID, which the inbox
// deduplicates.
func (r *failoverRig) publish(envs []idem.Envelope) {
	defer r.pub.Done()
	deadline := time.Now().Add(60 * time.Second)
	for _, env := range envs {
		for {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := r.e.Publish(ctx, env)
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				r.t.Errorf("publish %s: %v (still failing after 60 s)", env.ID, err)
				return
			}
			time.Sleep(20 * time.Millisecond) // a retry's backoff
		}
	}
}

// journal counts the journal entries on the node on port (readable on a
// standby too).
func journal(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var n int
	if err := c.QueryRow(context.Background(), `SELECT count(*) FROM idem.idem_journal`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// waitFor polls cond until it holds, failing t after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not %s after %s", what, timeout)
		}
		time.Sleep(5 * time.Millisecond) // polling a condition with a deadline
	}
}

// resumed waits for the first commit on the promoted standby, logs the
// time since the fault, then for the rest of the work, and checks that
// every increment applied exactly once there.
func (r *failoverRig) resumed(fault, promoted time.Time, before int) {
	t := r.t
	c := r.pair.Conn(r.pair.Standby)
	defer c.Close(context.Background())
	waitFor(t, 30*time.Second, "committing on the new primary", func() bool { return journal(t, c) > before })
	now := time.Now()
	t.Logf("failover: %s from the fault to the first commit on the new primary (%s of it after the promotion)",
		now.Sub(fault).Round(time.Millisecond), now.Sub(promoted).Round(time.Millisecond))
	r.pub.Wait()
	conn := enginetest.SchemaConn(t, r.pair.NodeURL(r.pair.Standby), "idem")
	enginetest.WaitSettled(t, enginetest.Rows(conn), 60*time.Second)
	enginetest.CheckExactlyOnce(t, r.st, enginetest.Rows(conn), r.want, failoverPerKey)
	waitFor(t, 10*time.Second, "ready", func() bool { return r.e.Ready() == nil })
}

// waitApplied waits until the engine has applied n increments.
func (r *failoverRig) waitApplied(n int) {
	c := r.pair.Conn(r.pair.Primary)
	defer c.Close(context.Background())
	waitFor(r.t, 30*time.Second, fmt.Sprintf("%d increments applied", n), func() bool { return journal(r.t, c) >= n })
}

// standbyJournal counts the journal entries the standby has replayed.
func (r *failoverRig) standbyJournal() int {
	c := r.pair.Conn(r.pair.Standby)
	defer c.Close(context.Background())
	return journal(r.t, c)
}

// A primary fenced read-only in place, its sessions left open, and the
// standby promoted: the writes on the old primary fail with SQLSTATE
// 25006, Ready says the store refuses writes, pgstore drops its sessions
// there, target_session_attrs=read-write finds the new primary, and every
// increment applies exactly once.
func TestFailoverFencedPrimary(t *testing.T) {
	t.Run("listener in the pool", func(t *testing.T) { testFailoverFencedPrimary(t, false) })
	// The queue's LISTEN session over Config.DirectURL is outside the
	// pool: left on the fenced primary, it would wait there for ever.
	t.Run("listener over DirectURL", func(t *testing.T) { testFailoverFencedPrimary(t, true) })
}

func testFailoverFencedPrimary(t *testing.T, direct bool) {
	pair := testenv.PostgresPair(t)
	r := newFailoverRig(t, pair, direct)
	r.waitApplied(40)
	fault := time.Now()
	pair.FenceReadOnly()
	waitFor(t, 30*time.Second, "unready with store.ErrReadOnly", func() bool { return errors.Is(r.e.Ready(), store.ErrReadOnly) })
	pair.CaughtUp()
	before := r.standbyJournal()
	pair.Promote()
	r.resumed(fault, time.Now(), before)
	old := pair.Conn(pair.Primary)
	defer old.Close(context.Background())
	app := pgstore.ApplicationName("idem")
	waitFor(t, 10*time.Second, "every pgstore session gone from the old primary", func() bool {
		var n int
		if err := old.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

// The primary stopped at once (its sessions end) and the standby promoted,
// with synchronous replication so that no acknowledged commit is lost:
// every increment applies exactly once on the new primary.
func TestFailoverStoppedPrimary(t *testing.T) {
	pair := testenv.PostgresPair(t)
	pair.SyncReplication()
	r := newFailoverRig(t, pair)
	r.waitApplied(40)
	fault := time.Now()
	pair.StopPrimary()
	before := r.standbyJournal()
	pair.Promote()
	r.resumed(fault, time.Now(), before)
}

// Open warns of asynchronous replication to a standby, refuses it under
// RequireSyncReplication, and accepts synchronous replication silently.
func TestOpenChecksReplication(t *testing.T) {
	pair := testenv.PostgresPair(t)
	ctx := context.Background()
	open := func(require bool) (string, error) {
		var logs bytes.Buffer
		st, err := pgstore.Open(ctx, pair.URL(), &pgstore.Config{Migrate: true, RequireSyncReplication: require, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		if err == nil {
			_ = st.Close()
		}
		return logs.String(), err
	}
	logs, err := open(false)
	if err != nil || !strings.Contains(logs, "asynchronously") || !strings.Contains(logs, "synchronous_standby_names") {
		t.Errorf("asynchronous standby: Open = %v, logs %q; want a warning naming synchronous_standby_names", err, logs)
	}
	if _, err := open(true); !errors.Is(err, pgstore.ErrAsyncReplication) || !strings.Contains(err.Error(), "synchronous_mode") {
		t.Errorf("asynchronous standby, RequireSyncReplication: Open = %v, want ErrAsyncReplication saying what to set", err)
	}
	pair.SyncReplication()
	for _, require := range []bool{false, true} {
		if logs, err := open(require); err != nil || strings.Contains(logs, "asynchronously") {
			t.Errorf("synchronous standby (require %v): Open = %v, logs %q; want no error and no warning", require, err, logs)
		}
	}
}

// A single primary fenced read-only: Open refuses it, saying that pgstore
// connects only to a primary; a URL that sets target_session_attrs=any
// opens it, and its writes fail with store.ErrReadOnly.
func TestOpenRefusesAReadOnlyServer(t *testing.T) {
	pair := testenv.PostgresPair(t)
	ctx := context.Background()
	st, err := pgstore.Open(ctx, pair.NodeURL(pair.Primary), &pgstore.Config{Migrate: true})
	if err != nil {
		t.Fatal(err)
	}
	_ = st.Close()
	pair.FenceReadOnly()
	_, err = pgstore.Open(ctx, pair.NodeURL(pair.Primary), nil)
	if !errors.Is(err, store.ErrReadOnly) || !strings.Contains(err.Error(), "primary") {
		t.Errorf("fenced primary: Open = %v, want store.ErrReadOnly saying pgstore connects only to the primary", err)
	}
	st, err = pgstore.Open(ctx, pair.NodeURL(pair.Primary)+"&target_session_attrs=any", nil)
	if err != nil {
		t.Fatalf("fenced primary, target_session_attrs=any: %v", err)
	}
	defer st.Close()
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	err = uow.Commit(ctx, &store.Changes{Inserts: []*store.Instance{{SagaType: "t", Key: "k", State: "s", Data: []byte(`{}`), Version: 1}}})
	if !errors.Is(err, store.ErrReadOnly) {
		t.Errorf("commit on the fenced primary: %v, want store.ErrReadOnly", err)
	}
}

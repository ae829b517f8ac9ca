package pgstore_test

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/silentproxy"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// replicaOn opens a store on schema through rawURL whose connections carry
// application_name app, as replicas of one deployment do.
func replicaOn(t *testing.T, rawURL, schema, app string, lease time.Duration) *pgstore.Store {
	t.Helper()
	pc, err := pgxpool.ParseConfig(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	pc.MaxConns = 4
	pc.ConnConfig.RuntimeParams["search_path"] = pgstore.SearchPath(schema)
	pc.ConnConfig.RuntimeParams["application_name"] = app
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := pgstore.New(context.Background(), pool, &pgstore.Config{Schema: schema, Lease: lease, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		pool.Close()
		t.Fatalf("open a replica's store: %v", err)
	}
	t.Cleanup(func() {
		_ = s.Close()
		pool.Close()
	})
	return s
}

// cutBeforeLastStatement is a silentproxy.Cutter for the PostgreSQL
// protocol: it passes the client's messages through up to the next group
// that executes statements (Bind … Sync), forwards that group without its
// last statement (COMMIT's Bind and Execute) and its Sync, and goes
// silent. The server has then run every write of the unit of work and
// waits, inside the transaction, for the rest of the pipeline.
func cutBeforeLastStatement() silentproxy.Cutter {
	var pending []byte // held back: messages of a group whose Sync has not come
	return func(p []byte) ([]byte, bool) {
		pending = append(pending, p...)
		var out []byte
		lastBind, off := -1, 0
		for off+5 <= len(pending) {
			n := 1 + int(binary.BigEndian.Uint32(pending[off+1:off+5]))
			if off+n > len(pending) {
				break
			}
			switch pending[off] {
			case 'B':
				lastBind = off
			case 'S':
				if lastBind >= 0 {
					return append(out, pending[:lastBind]...), true
				}
				out = append(out, pending[:off+n]...)
				pending, off = pending[off+n:], 0
				continue
			}
			off += n
		}
		return out, false
	}
}

// TestCommitCutOffMidwayReleasesItsLocks: a replica's unit of work sends
// its writes, and the network goes silent before its COMMIT reaches the
// server, through a proxy that keeps the TCP connection open (so neither
// TCP keepalives nor the claim's idle timeout can see it). Its session
// holds the saga's row lock; another replica's unit of work on the same
// saga waits for it, until a store of the deployment ends the stalled
// session after Lease, and then commits. The first replica's commit fails;
// only the second one's effect is stored.
func TestCommitCutOffMidwayReleasesItsLocks(t *testing.T) {
	raw := testenv.PostgresURL(t)
	setup := openStore(t, pgstore.Config{})
	schema := setup.Schema()
	app := "idem_t_" + randHex()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	px, err := silentproxy.New(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = px.Close() })
	proxied := *u
	proxied.Host = px.Addr()
	const lease = time.Second
	a := replicaOn(t, proxied.String(), schema, app, lease)
	b := replicaOn(t, raw, schema, app, lease)
	ctx := context.Background()

	k := store.Key{SagaType: "order", Key: "k-1"}
	now := time.Now().UTC().Truncate(time.Microsecond)
	in := &store.Instance{SagaType: k.SagaType, Key: k.Key, State: "Open", Data: []byte(`{}`), Version: 1, CreatedAt: now, UpdatedAt: now}
	commitChanges(t, setup, &store.Changes{Inserts: []*store.Instance{in}})

	// Replica a: load, then commit through the proxy, cut before COMMIT.
	ua, err := a.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ua.Load(ctx, &store.LoadParams{Keys: []store.Key{k}}); err != nil {
		t.Fatal(err)
	}
	px.CutWith(cutBeforeLastStatement())
	actx, acancel := context.WithCancel(ctx)
	defer acancel()
	aDone := make(chan error, 1)
	go func() { aDone <- ua.Commit(actx, update(in, "ByA", "m-a", now)) }()
	waitStalled(t, app)
	stalled := time.Now()

	// Replica b's unit of work on the same saga conflicts on a's row lock
	// (a commit does not wait for another's lock) and is re-applied, as
	// the engine does, until the stalled session is ended.
	bctx, bcancel := context.WithTimeout(ctx, 60*lease) // far beyond the bound (Lease + 1s), far below TCP's hours
	defer bcancel()
	if err := commitRetryingConflicts(bctx, b, k, update(in, "ByB", "m-b", now)); err != nil {
		t.Fatalf("the second replica's commit on the saga the cut-off replica had written: got %v, want nil once the stalled session is ended", err)
	}
	t.Logf("the second replica's commit went through %v after the first one's session was seen stalled (Lease %v)", time.Since(stalled).Round(time.Millisecond), lease)
	acancel()
	if err := <-aDone; err == nil {
		t.Error("the cut-off replica's commit: got nil, want an error (its session was ended, its transaction rolled back)")
	}
	t.Logf("the cut-off replica's commit returned %v after the first one's session was seen stalled", time.Since(stalled).Round(time.Millisecond))
	_ = px.Close() // the partition ends: the cut-off replica's connections close at once

	conn := schemaConn(t, schema)
	var state string
	var version int64
	if err := conn.QueryRow(ctx, `SELECT state, version FROM idem_instances WHERE saga_type = $1 AND key = $2`, k.SagaType, k.Key).Scan(&state, &version); err != nil {
		t.Fatal(err)
	}
	if state != "ByB" || version != 2 {
		t.Errorf("saga after both commits: state %s version %d, want ByB 2 (only the second replica's update)", state, version)
	}
	var inbox []string
	rows, err := conn.Query(ctx, `SELECT message_id FROM idem_inbox ORDER BY message_id`)
	if err != nil {
		t.Fatal(err)
	}
	if inbox, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(inbox) != 1 || inbox[0] != "m-b" {
		t.Errorf("inbox after both commits: got %q, want [m-b]", inbox)
	}
}

// update is the changes of a unit of work that moves in to state and
// records message id in its inbox.
func update(in *store.Instance, state, id string, at time.Time) *store.Changes {
	next := *in
	next.State = state
	return &store.Changes{
		Updates: []*store.Instance{&next},
		Inbox:   []store.InboxEntry{{InboxKey: store.InboxKey{SagaType: in.SagaType, Key: in.Key, MessageID: id}, ProcessedAt: at}},
	}
}

// commitRetryingConflicts loads k and commits c in a unit of work of s,
// again after every store.ErrConflict (every 50 ms), until one commits or
// ctx ends.
func commitRetryingConflicts(ctx context.Context, s store.Store, k store.Key, c *store.Changes) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		u, err := s.Begin(ctx)
		if err != nil {
			return err
		}
		if _, err := u.Load(ctx, &store.LoadParams{Keys: []store.Key{k}}); err != nil {
			_ = u.Rollback(ctx)
			return err
		}
		if err := u.Commit(ctx, c); !errors.Is(err, store.ErrConflict) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

func commitChanges(t *testing.T, s store.Store, c *store.Changes) {
	t.Helper()
	uow, err := s.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(context.Background(), c); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

// waitStalled waits until a session of app has written inside its
// transaction and waits on its client in the middle of a pipeline.
func waitStalled(t *testing.T, app string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	enginetest.WaitFor(t, 30*time.Second, "the cut-off replica's session to wait on its client mid-transaction", func() (bool, error) {
		var n int
		err := conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND wait_event = 'ClientRead' AND backend_xid IS NOT NULL`, app).Scan(&n)
		return n == 1, err
	})
}

// Open gives each connection TCP settings derived from the lease, so
// that the server notices a real partition (dropped packets) within about
// one lease instead of TCP's default of hours, and the application_name of
// its deployment, which its watchdog matches.
func TestOpenSetsPartitionTimeouts(t *testing.T) {
	s := openStore(t, pgstore.Config{Lease: 30 * time.Second})
	var userTimeout, idle, interval, count, app string
	err := s.Pool().QueryRow(context.Background(), `SELECT current_setting('tcp_user_timeout'), current_setting('tcp_keepalives_idle'),
		current_setting('tcp_keepalives_interval'), current_setting('tcp_keepalives_count'), current_setting('application_name')`).Scan(&userTimeout, &idle, &interval, &count, &app)
	if err != nil {
		t.Fatal(err)
	}
	if userTimeout != "120000" || idle != "10" || interval != "3" || count != "3" {
		t.Errorf("tcp_user_timeout %s ms, tcp_keepalives_idle %s s, interval %s s, count %s; want 120000, 10, 3, 3 for a 30s lease", userTimeout, idle, interval, count)
	}
	if want := "idem/" + s.Schema(); app != want || pgstore.ApplicationName(s.Schema()) != want {
		t.Errorf("application_name %q, ApplicationName %q; want %q", app, pgstore.ApplicationName(s.Schema()), want)
	}
}

// ApplicationName fits PostgreSQL's 63 bytes and printable ASCII, and
// keeps schemas apart that differ only beyond what fits.
func TestApplicationNameFits(t *testing.T) {
	long := strings.Repeat("s", 62)
	seen := map[string]string{}
	for _, schema := range []string{"idem", long + "a", long + "b", "Tenant_é", "Tenant_è", "x<script>\x00"} {
		name := pgstore.ApplicationName(schema)
		if len(name) > 63 || !strings.HasPrefix(name, "idem/") || strings.IndexFunc(name, func(r rune) bool { return r < 0x20 || r > 0x7e }) >= 0 {
			t.Errorf("ApplicationName(%q) = %q: want at most 63 bytes of printable ASCII beginning idem/", schema, name)
		}
		if other, dup := seen[name]; dup {
			t.Errorf("ApplicationName(%q) = ApplicationName(%q) = %q", schema, other, name)
		}
		seen[name] = schema
	}
}

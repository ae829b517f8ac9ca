package pgstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/storetest"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/transporttest"
)

// pgbouncerURL returns IDEM_TEST_PGBOUNCER_URL: PgBouncer in transaction
// pooling mode in front of the test PostgreSQL (scripts/pgbouncer.sh).
func pgbouncerURL(t testing.TB) string {
	t.Helper()
	return testenv.Server(t, "IDEM_TEST_PGBOUNCER_URL", "PgBouncer tests", "postgres://postgres@127.0.0.1:6432/postgres?sslmode=disable")
}

// openPooled returns a store on a fresh schema of its own that connects
// through PgBouncer, with the test PostgreSQL as its Config.DirectURL
// unless cfg names one; the schema is dropped when the test ends.
func openPooled(t testing.TB, cfg pgstore.Config) *pgstore.Store {
	t.Helper()
	if cfg.Schema == "" {
		cfg.Schema = "t_" + randHex()
		cfg.Migrate = true
		t.Cleanup(func() { dropSchema(t, cfg.Schema) })
	}
	if cfg.DirectURL == "" {
		cfg.DirectURL = testenv.PostgresURL(t)
	}
	s, err := pgstore.Open(context.Background(), pgbouncerURL(t), &cfg)
	if err != nil {
		t.Fatalf("open a store through PgBouncer: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// dropSchema drops schema over a direct connection.
func dropSchema(t testing.TB, schema string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
		return
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
		t.Errorf("drop schema %s: %v", schema, err)
	}
}

// pooledDomainTx is the DomainTx feature through PgBouncer: the pooled
// sessions do not have the store's schema on their search path, so the
// application's table is named with its schema (which the test reads from
// the transaction's application_name, "idem/" and the schema).
var pooledDomainTx = &storetest.DomainTx{
	Setup: domainTxFeature.Setup,
	Insert: func(ctx context.Context, handle any, v string) error {
		tx, ok := pgstore.TxFrom(handleOf{handle})
		if !ok {
			return fmt.Errorf("TxFrom(%T): false", handle)
		}
		var app string
		if err := tx.QueryRow(ctx, `SELECT current_setting('application_name')`).Scan(&app); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO `+pgx.Identifier{strings.TrimPrefix(app, "idem/"), "domain_rows"}.Sanitize()+` (v) VALUES ($1)`, v)
		return err
	},
	Count: domainTxFeature.Count,
}

// The whole store contract holds through PgBouncer in transaction mode,
// with the migrations and LISTEN over the direct URL.
func TestConformanceThroughPgBouncer(t *testing.T) {
	pgbouncerURL(t)
	f := conformance()
	f.DomainTx = pooledDomainTx
	f.SharedClock = func(t *testing.T) (store.Store, store.Store) {
		a := openPooled(t, pgstore.Config{})
		return a, openPooled(t, pgstore.Config{Schema: a.Schema()})
	}
	f.Schema = nil // it opens the store on a direct URL of its own
	storetest.Run(t, f, func(t *testing.T) store.Store {
		return openPooled(t, pgstore.Config{Lease: conformanceLease, PollInterval: 100 * time.Millisecond})
	})
}

// The queue contract holds through PgBouncer: with LISTEN over the direct
// URL, and polling without one.
func TestQueueConformanceThroughPgBouncer(t *testing.T) {
	pgbouncerURL(t)
	const lease = 300 * time.Millisecond
	features := transporttest.Features{Lease: lease, Fencing: true, NativeDelay: true, Partitioned: true, Pending: true, Shared: true}
	for _, direct := range []bool{true, false} {
		t.Run(fmt.Sprintf("direct=%v", direct), func(t *testing.T) {
			transporttest.Run(t, features, func(t *testing.T) transport.Transport {
				cfg := pgstore.Config{Lease: lease, PollInterval: 100 * time.Millisecond}
				if !direct {
					s := openPooled(t, pgstore.Config{}) // migrates the schema over the direct URL
					cfg.Schema, cfg.DirectURL = s.Schema(), "-"
				}
				return openPooledNoDirect(t, cfg)
			})
		})
	}
}

// openPooledNoDirect is openPooled, without a direct URL when
// cfg.DirectURL is "-".
func openPooledNoDirect(t *testing.T, cfg pgstore.Config) *pgstore.Store {
	if cfg.DirectURL != "-" {
		return openPooled(t, cfg)
	}
	cfg.DirectURL = ""
	s, err := pgstore.Open(context.Background(), pgbouncerURL(t), &cfg)
	if err != nil {
		t.Fatalf("open a store through PgBouncer without a direct URL: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Without a direct URL a store through PgBouncer cannot LISTEN: its queue
// polls, says so once, and still hands out what is published.
func TestPoolerWithoutDirectURLPolls(t *testing.T) {
	first := openPooled(t, pgstore.Config{})
	var logs syncBuffer
	s := openPooledNoDirect(t, pgstore.Config{Schema: first.Schema(), DirectURL: "-", PollInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Publish(ctx, []transport.Envelope{{ID: "m1", Type: "t", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		ds, err := s.Receive(ctx, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != 1 || ds[0].Envelope.ID != "m1" {
			t.Fatalf("received %v, want m1", ds)
		}
		if err := s.Nack(ctx, ds[0], 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := strings.Count(logs.String(), "the queue polls every PollInterval"); n != 1 {
		t.Errorf("the store said %d times that its queue polls, want once; logs:\n%s", n, logs.String())
	}
}

// A migration through PgBouncer without a direct URL is refused: it needs
// a session advisory lock, which a transaction pooler cannot keep. The
// error says what to give.
func TestMigrateThroughPgBouncerNeedsDirectURL(t *testing.T) {
	schema := "t_" + randHex()
	t.Cleanup(func() { dropSchema(t, schema) })
	s, err := pgstore.Open(context.Background(), pgbouncerURL(t), &pgstore.Config{Schema: schema, Migrate: true})
	if err == nil {
		_ = s.Close()
		t.Fatal("Open with Migrate through PgBouncer without a direct URL: got nil error, want a refusal")
	}
	for _, want := range []string{"DirectURL", pgstore.DirectURLParam, "idem migrate", "advisory lock"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "cannot reach") {
		t.Errorf("the error sends the operator to check that the server runs: %v", err)
	}
}

// The direct URL may come as a query parameter of the pooler's URL, for
// programs that take one connection string (idem torture --store): the
// migration then runs over it, and the parameter does not reach the
// server as a setting.
func TestDirectURLAsAQueryParameter(t *testing.T) {
	schema := "t_" + randHex()
	t.Cleanup(func() { dropSchema(t, schema) })
	u, err := url.Parse(pgbouncerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(pgstore.DirectURLParam, testenv.PostgresURL(t))
	u.RawQuery = q.Encode()
	s, err := pgstore.Open(context.Background(), u.String(), &pgstore.Config{Schema: schema, Migrate: true})
	if err != nil {
		t.Fatalf("Open(%s): %v", u, err)
	}
	defer s.Close()
	if err := s.Publish(context.Background(), []transport.Envelope{{ID: "m1", Type: "t", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
}

// A pool with pgx's default statement cache, through PgBouncer in
// transaction mode, finds another client's prepared statement on the
// server session it is given: New says that the pooler shares sessions,
// and to use Open.
func TestNewOnTransactionPoolerSaysWhatIsWrong(t *testing.T) {
	url := pgbouncerURL(t)
	ctx := context.Background()
	var last error
	// The first pool prepares pgx's cached statements on the server
	// session PgBouncer gives it; the second is given the same session
	// (the only idle one) and prepares them again.
	for range 2 {
		pool, err := pgxpool.New(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		s, err := pgstore.New(ctx, pool, &pgstore.Config{Schema: "public"})
		if err == nil {
			_ = s.Close()
		}
		pool.Close()
		last = err
	}
	if last == nil {
		t.Fatal("New on a pool with a statement cache through PgBouncer: got nil error, want a refusal naming the pooler")
	}
	for _, a := range []string{"PgBouncer", "session", "prepared statement", "pgstore.Open"} {
		if !strings.Contains(last.Error(), a) {
			t.Errorf("error %q does not mention %q", last, a)
		}
	}
}

// A pool given to New with search_path as a startup parameter is refused
// by PgBouncer; New says that Open works through it.
func TestNewWithStartupParametersThroughPgBouncerSaysUseOpen(t *testing.T) {
	cfg, err := pgxpool.ParseConfig(pgbouncerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = pgstore.SearchPath("idem")
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = pgstore.New(context.Background(), pool, &pgstore.Config{})
	if err == nil {
		t.Fatal("New through PgBouncer with search_path set: got nil error")
	}
	for _, a := range []string{"PgBouncer", "search_path", "pgstore.Open"} {
		if !strings.Contains(err.Error(), a) {
			t.Errorf("error %q does not mention %q", err, a)
		}
	}
	if errors.Is(err, store.ErrNotMigrated) {
		t.Errorf("error %v says the schema is not migrated", err)
	}
}

// pooledSession is a connection through PgBouncer with the
// application_name of s's connections, that the test drives by hand.
func pooledSession(t *testing.T, s *pgstore.Store) *session {
	t.Helper()
	cfg, err := pgx.ParseConfig(pgbouncerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = pgstore.ApplicationName(s.Schema())
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return &session{conn: c}
}

// stalledServerPID waits for the server session that stalled mid-pipeline
// holding a lock on a table of schema, and returns its pid: PgBouncer's
// clients do not know the pid of the server session they are lent.
func stalledServerPID(t *testing.T, obs *pgx.Conn, schema string) (pid uint32, app string) {
	t.Helper()
	enginetest.WaitFor(t, 30*time.Second, "a session to wait on its client mid-pipeline, holding a lock in schema "+schema, func() (bool, error) {
		err := obs.QueryRow(context.Background(), `SELECT a.pid, a.application_name FROM pg_stat_activity a
			WHERE a.state = 'active' AND a.wait_event = 'ClientRead' AND EXISTS (
			  SELECT FROM pg_locks l JOIN pg_class c ON c.oid = l.relation JOIN pg_namespace n ON n.oid = c.relnamespace
			  WHERE l.pid = a.pid AND n.nspname = $1)`, schema).Scan(&pid, &app)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, nil
		}
		return err == nil, err
	})
	return pid, app
}

// Two deployments whose sessions all come through one PgBouncer, on one
// role and database: PgBouncer gives each server session the
// application_name of the client it lends it to, so a store's watchdog
// ends its own deployment's stalled session after its lease, and never
// the other deployment's (another schema), whatever its lease.
func TestWatchdogThroughPgBouncerEndsOnlyItsDeploymentsStalls(t *testing.T) {
	a := openPooled(t, pgstore.Config{Lease: time.Second})
	b := openPooled(t, pgstore.Config{Lease: 30 * time.Second})
	ctx := context.Background()
	obs, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer obs.Close(ctx)

	other := pooledSession(t, b)
	otherP := other.stallIn(t, b.Schema(), `SELECT 1`)
	otherPID, otherApp := stalledServerPID(t, obs, b.Schema())
	if want := pgstore.ApplicationName(b.Schema()); otherApp != want {
		t.Errorf("the pooled server session of b shows application_name %q, want %q", otherApp, want)
	}
	own := pooledSession(t, a)
	ownP := own.stallIn(t, a.Schema(), `SELECT 1`)
	ownPID, _ := stalledServerPID(t, obs, a.Schema())

	enginetest.WaitFor(t, 60*time.Second, "a's watchdog to end a's stalled session", func() (bool, error) {
		pgstore.EndStalled(ctx, a)
		return !alive(t, obs, ownPID), nil
	})
	_ = ownP.Close()
	if !alive(t, obs, otherPID) {
		t.Fatalf("a stalled session of another deployment (schema %s, lease 30s) through the same PgBouncer was ended by a store of schema %s (lease 1s)", b.Schema(), a.Schema())
	}
	if err := finish(otherP); err != nil {
		t.Errorf("the other deployment's session, once its pipeline is synced: %v", err)
	}
}

// The databases of scripts/pgbouncer.sh's PgBouncer that run in statement
// and in session pooling mode.
const (
	statementModeDB = "idem_statement_mode"
	sessionModeDB   = "idem_session_mode"
)

// poolModeURL is IDEM_TEST_PGBOUNCER_URL with database db.
func poolModeURL(t *testing.T, db string) string {
	u, err := url.Parse(pgbouncerURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + db
	return u.String()
}

// PgBouncer in session mode refuses the startup parameters too: Open
// works through it as through transaction mode.
func TestOpenThroughSessionPooler(t *testing.T) {
	schema := "t_" + randHex()
	t.Cleanup(func() { dropSchema(t, schema) })
	s, err := pgstore.Open(context.Background(), poolModeURL(t, sessionModeDB), &pgstore.Config{Schema: schema, Migrate: true, DirectURL: testenv.PostgresURL(t)})
	if err != nil {
		if strings.Contains(err.Error(), sessionModeDB+`" does not exist`) {
			t.Fatalf("the PgBouncer at IDEM_TEST_PGBOUNCER_URL has no database %s in session mode: start it with scripts/pgbouncer.sh (pgbouncer_start): %v", sessionModeDB, err)
		}
		t.Fatalf("Open through PgBouncer in session mode: %v", err)
	}
	defer s.Close()
	ctx := context.Background()
	if err := s.Publish(ctx, []transport.Envelope{{ID: "m1", Type: "t", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	ds, err := s.Receive(ctx, 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("receive through PgBouncer in session mode: %v, %d deliveries", err, len(ds))
	}
	if err := s.Ack(ctx, ds); err != nil {
		t.Fatal(err)
	}
}

// PgBouncer in statement mode refuses transactions of several statements,
// every unit of work: Open refuses it and says which pool_mode to set.
func TestOpenThroughStatementPoolerSaysWhatToSet(t *testing.T) {
	s, err := pgstore.Open(context.Background(), poolModeURL(t, statementModeDB), &pgstore.Config{Schema: "t_" + randHex(), DirectURL: testenv.PostgresURL(t)})
	if err == nil {
		_ = s.Close()
		t.Fatal("Open through PgBouncer in statement mode: got nil error, want a refusal")
	}
	if strings.Contains(err.Error(), statementModeDB+`" does not exist`) {
		t.Fatalf("the PgBouncer at IDEM_TEST_PGBOUNCER_URL has no database %s in statement mode: start it with scripts/pgbouncer.sh (pgbouncer_start): %v", statementModeDB, err)
	}
	for _, want := range []string{"statement mode", "pool_mode = transaction"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// A direct URL that is not one, or that is the pooler itself, stops Open
// with what to give instead.
func TestBadDirectURLSaysWhatToGive(t *testing.T) {
	_, err := pgstore.Open(context.Background(), pgbouncerURL(t), &pgstore.Config{DirectURL: "postgres://h:notaport/db"})
	if err == nil || !strings.Contains(err.Error(), "Config.DirectURL") || !strings.Contains(err.Error(), "PostgreSQL itself") {
		t.Errorf("Open with an unparsable DirectURL: got %v, want an error naming Config.DirectURL and what to give", err)
	}
	schema := "t_" + randHex()
	t.Cleanup(func() { dropSchema(t, schema) })
	s, err := pgstore.Open(context.Background(), pgbouncerURL(t), &pgstore.Config{Schema: schema, Migrate: true, DirectURL: pgbouncerURL(t)})
	if err == nil {
		_ = s.Close()
		t.Fatal("Open with the pooler as its DirectURL: got nil error")
	}
	for _, want := range []string{"Config.DirectURL is a connection pooler", "PostgreSQL itself"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// With a direct URL, a store through PgBouncer LISTENs over it: a consumer
// waiting on an empty queue is woken by a publish through the pooler long
// before its minute-long poll would look again.
func TestPoolerListensOverDirectURL(t *testing.T) {
	s := openPooled(t, pgstore.Config{PollInterval: time.Minute})
	publisher := openPooled(t, pgstore.Config{Schema: s.Schema()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make(chan []transport.Delivery, 1)
	go func() {
		ds, _ := s.Receive(ctx, 10) // waits: the queue is empty
		got <- ds
	}()
	if err := publisher.Publish(ctx, []transport.Envelope{{ID: "m1", Type: "t", Body: []byte(`{}`)}}); err != nil {
		t.Fatal(err)
	}
	if ds := <-got; len(ds) != 1 || ds[0].Envelope.ID != "m1" {
		t.Fatalf("the waiting consumer received %v within 30s, want m1: no notification reached it (its poll is a minute)", ds)
	}
}

// BenchmarkQueueCycle publishes, receives and acks one message at a time,
// on PostgreSQL directly and through PgBouncer (unprepared statements,
// one more hop): what the pooler costs a round of the queue.
func BenchmarkQueueCycle(b *testing.B) {
	for _, via := range []string{"direct", "pgbouncer"} {
		b.Run(via, func(b *testing.B) {
			var s *pgstore.Store
			if via == "direct" {
				s = openStore(b, pgstore.Config{})
			} else {
				s = openPooled(b, pgstore.Config{})
			}
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				if err := s.Publish(ctx, []transport.Envelope{{ID: fmt.Sprint("m", i), Type: "t", Body: []byte(`{}`)}}); err != nil {
					b.Fatal(err)
				}
				ds, err := s.Receive(ctx, 1)
				if err != nil || len(ds) != 1 {
					b.Fatalf("receive: %v, %d deliveries", err, len(ds))
				}
				if err := s.Ack(ctx, ds); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(s.RoundTrips())/float64(b.N), "trips/op")
		})
	}
}

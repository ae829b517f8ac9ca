package pgstore

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var (
	_ store.Store           = (*Store)(nil)
	_ store.Queue           = (*Store)(nil)
	_ store.UnitOfWork      = (*unitOfWork)(nil)
	_ store.QueueUnitOfWork = (*unitOfWork)(nil)
	_ store.ClaimUnitOfWork = (*unitOfWork)(nil)

	_ transport.PartitionedConsumer = (*Store)(nil)
	_ transport.PendingCounter      = (*Store)(nil)
	_ store.PoolSizer               = (*Store)(nil)
)

// ErrUnsafeCommit is returned by Open when the server acknowledges commits
// before they are durable and Config.AllowUnsafeCommit is not set.
var ErrUnsafeCommit = errors.New("postgresql acknowledges commits before they are durable")

// Config configures a Store. The zero value means the defaults.
type Config struct {
	// Schema holds Idem's tables. Default "idem". It must be a plain
	// identifier (letters, digits, underscore; at most 63 bytes) and is
	// used exactly as given, quoted: "Tenant_x" and "tenant_x" are two
	// schemas.
	Schema string
	// Migrate runs the schema migrations at Open. Without it, Open refuses
	// a database whose schema is missing or old; run `idem migrate`.
	Migrate bool
	// AllowUnsafeCommit accepts a server whose commits are acknowledged
	// before they are durable (synchronous_commit=off or fsync=off). Such a
	// server may lose acknowledged messages and state after a crash.
	AllowUnsafeCommit bool
	// RequireSyncReplication makes Open refuse, with ErrAsyncReplication, a
	// primary that acknowledges commits before a standby has them
	// (synchronous_standby_names empty, or synchronous_commit local): a
	// failover to a standby may then lose acknowledged commits. Without
	// it, Open logs a warning when the primary has standbys and replicates
	// asynchronously. See docs/operations.md, PostgreSQL, "Failover".
	RequireSyncReplication bool
	// Lease is the queue's visibility timeout: a delivery not settled within
	// it is handed out again. A unit of work that claimed its deliveries
	// itself (store.ClaimUnitOfWork) holds them while it runs; the server
	// ends its session if it sits idle inside the transaction for longer
	// than Lease, and the deliveries are handed out again. Lease also
	// bounds a replica cut off in the middle of a unit of work: its
	// session is ended (by the TCP settings Open gives each connection, or
	// by another replica's store, which ends sessions of its
	// application_name that waited on their client inside a transaction
	// for longer than Lease) and its row locks released within about
	// Lease plus a quarter of it. Replicas sharing a database should use
	// one Lease. Default 30s.
	Lease time.Duration
	// PollInterval bounds how long an idle consumer waits without a
	// notification before looking at the queue again. Default 1s.
	PollInterval time.Duration
	// MaxConns is the most connections the pool Open creates holds at
	// once. Default DefaultMaxConns(), which fits an engine with the
	// default idem.Config at this GOMAXPROCS. The smallest accepted is 2: a
	// Receive keeps one connection listening for notifications, and
	// Publish and everything else share the others. An engine refuses to
	// start on a pool smaller than its Lanes plus three (the lanes are
	// shared by all its Consumers; the three are the queue listener or
	// outbox relay, the timer poller and the sweeper).
	MaxConns int32
	// Logger receives the store's logs. Nil means slog.Default().
	Logger *slog.Logger
	// DirectURL is a connection string of PostgreSQL itself, for a store
	// whose Open URL is a connection pooler (PgBouncer in transaction
	// mode): the migrations and the queue's LISTEN go over it, since they
	// need a session of their own. Without it such a store refuses to
	// migrate and its queue polls every PollInterval. When set, the
	// queue's LISTEN goes over it whatever Open's URL is. Open's URL may
	// give it as its DirectURLParam query parameter, URL-escaped.
	DirectURL string

	viaPooler bool // set by Open when url is a pooler (pooler.go)
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// minConns is the smallest pool accepted: the queue listener holds one
// connection for as long as a Receive runs, and Publish must find another.
const minConns = 2

// DefaultMaxConns returns Config.MaxConns's default: 2×GOMAXPROCS + 4, at
// least 16. An engine with the default idem.Config needs 2×GOMAXPROCS + 3
// connections at once: its Lanes (default 2×GOMAXPROCS, shared by its
// Consumers, default 4), plus the queue listener or outbox relay, the
// timer poller and the sweeper. The one left over, and any below 16, serve
// the application's own calls (Publish, the admin API).
func DefaultMaxConns() int32 {
	return int32(max(16, 2*runtime.GOMAXPROCS(0)+4))
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	if out.Schema == "" {
		out.Schema = "idem"
	}
	if !identRE.MatchString(out.Schema) {
		return out, fmt.Errorf("pgstore: Config.Schema %q is not a plain identifier: use letters, digits and underscores", out.Schema)
	}
	if out.Lease < 0 || out.PollInterval < 0 || out.MaxConns < 0 {
		return out, errors.New("pgstore: Config.Lease, PollInterval and MaxConns must not be negative: use 0 for the default")
	}
	if out.Lease == 0 {
		out.Lease = 30 * time.Second
	}
	if out.PollInterval == 0 {
		out.PollInterval = time.Second
	}
	if out.MaxConns == 0 {
		out.MaxConns = DefaultMaxConns()
	}
	if out.MaxConns < minConns {
		return out, fmt.Errorf("pgstore: Config.MaxConns is %d, below the smallest pool of %d: the queue listener holds a connection while Receive runs, and Publish needs another; use 0 for the default (%d)",
			out.MaxConns, minConns, DefaultMaxConns())
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}

// Store is a PostgreSQL store.Store and transport.Transport. It is safe for
// concurrent use. Create it with Open (or New on your own pool).
type Store struct {
	cfg      Config
	pool     *pgxpool.Pool
	ownsPool bool
	log      *slog.Logger
	// fairIndexes builds the indexes of fair receives once.
	fairIndexes sync.Once
	trips       *tripCounter

	closeOnce sync.Once
	closed    atomic.Bool
	done      chan struct{} // closed by Close

	lmu      sync.Mutex
	listenOn bool
	wake     chan struct{} // closed and replaced on each notification
	lwg      sync.WaitGroup
	lcancel  context.CancelFunc

	stalledOnce sync.Once // starts watchStalled
	smu         sync.Mutex
	stalls      map[stallSeen]time.Time // guarded by smu: when endStalled first saw each wait

	groups groupsCache // GroupDeadLetters' answers (groupscache.go)

	notifyOn bool
	notify   chan struct{} // capacity 1: a pending notification
	// notifySent is when the latest NOTIFY that committed was sent;
	// notifyWanted is when the latest commit that needed one ended
	// (notify.go).
	notifySent, notifyWanted atomic.Int64
	notifySpacing            time.Duration
	notifyBase               time.Time // the times above are since it (notifyNow)
	bg                       context.Context
	bgCancel                 context.CancelFunc // cancelled by Close
}

// Open connects to the database at url, checks that commits are durable,
// migrates the schema when cfg.Migrate is set or checks it is current
// otherwise. The store owns the pool and closes it on Close.
func Open(ctx context.Context, url string, cfg *Config) (*Store, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if url, err = withDirectURL(url, &c); err != nil {
		return nil, err
	}
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse connection string: %w (want postgres://user@host:port/db)", redact(err))
	}
	pc.MaxConns = c.MaxConns
	pc.ConnConfig.RuntimeParams["search_path"] = SearchPath(c.Schema)
	pc.ConnConfig.RuntimeParams["application_name"] = ApplicationName(c.Schema)
	for k, v := range sessionParams(c.Lease) {
		pc.ConnConfig.RuntimeParams[k] = v
	}
	targetReadWrite(pc, url)
	done := make(chan struct{})
	watch := newSessionWatch(c.Logger.With("component", "idem.pgstore"), done)
	watch.hook(pc)
	trips := &tripCounter{watch: watch}
	pc.ConnConfig.Tracer = trips
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", redact(err))
	}
	watch.pool.Store(pool)
	s, err := newStore(ctx, pool, c, trips, done)
	if err != nil {
		pool.Close()
		close(done)
		if refused := (*poolerRefusal)(nil); errors.As(err, &refused) {
			return openThroughPooler(ctx, url, c, refused)
		}
		return nil, err
	}
	s.ownsPool = true
	return s, nil
}

// New uses an existing pool, whose connections must have search_path set
// to cfg.Schema: set RuntimeParams["search_path"] to SearchPath(schema),
// quoted, since PostgreSQL folds an unquoted name to lower case. New
// refuses a pool whose connections use another schema. The caller keeps
// ownership of the pool. Round trips are counted only by stores made with
// Open.
func New(ctx context.Context, pool *pgxpool.Pool, cfg *Config) (*Store, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if n := pool.Config().MaxConns; n < minConns {
		return nil, fmt.Errorf("pgstore: the pool holds at most %d connection, below the smallest of %d: the queue listener holds a connection while Receive runs, and Publish needs another; raise the pool's MaxConns",
			n, minConns)
	}
	return newStore(ctx, pool, c, nil, make(chan struct{}))
}

func newStore(ctx context.Context, pool *pgxpool.Pool, c Config, trips *tripCounter, done chan struct{}) (*Store, error) {
	s := &Store{cfg: c, pool: pool, log: c.Logger.With("component", "idem.pgstore"), trips: trips, done: done, wake: make(chan struct{}), notify: make(chan struct{}, 1), notifySpacing: defaultNotifySpacing, notifyBase: time.Now()}
	s.notifySent.Store(-int64(defaultNotifySpacing))
	s.bg, s.bgCancel = context.WithCancel(context.Background())
	if err := s.checkServer(ctx); err != nil {
		return nil, err
	}
	if err := s.checkReplication(ctx); err != nil {
		return nil, err
	}
	if c.viaPooler {
		return s, s.openPooled(ctx)
	}
	if c.Migrate {
		if err := s.Migrate(ctx); err != nil {
			return nil, err
		}
	}
	if err := s.checkSearchPath(ctx); err != nil {
		return nil, err
	}
	if !c.Migrate {
		if err := s.checkSchema(ctx); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// SearchPath returns the search_path setting that selects schema, quoted
// so that PostgreSQL keeps its case, for the RuntimeParams of a pool given
// to New.
func SearchPath(schema string) string {
	return pgx.Identifier{schema}.Sanitize()
}

// checkSearchPath makes sure that the pool's connections resolve Idem's
// unqualified table names in s.cfg.Schema and no other schema: a search
// path that names the schema unquoted folds "Tenant_x" to tenant_x, and
// the store would then read and write another deployment's tables.
func (s *Store) checkSearchPath(ctx context.Context) error {
	var current pgtype.Text
	if err := s.pool.QueryRow(ctx, `SELECT current_schema()`).Scan(&current); err != nil {
		return fmt.Errorf("pgstore: check search_path: %w", redact(err))
	}
	switch {
	case current.Valid && current.String == s.cfg.Schema:
		return nil
	case !current.Valid && !s.cfg.Migrate:
		return fmt.Errorf("pgstore: %w: schema %s does not exist: run `idem migrate --store <url>` (or set Config.Migrate)", store.ErrNotMigrated, s.cfg.Schema)
	}
	var setting string
	if err := s.pool.QueryRow(ctx, `SELECT current_setting('search_path')`).Scan(&setting); err != nil {
		return fmt.Errorf("pgstore: check search_path: %w", redact(err))
	}
	return fmt.Errorf("pgstore: the connections' search_path is %s, which selects schema %q, not %q: "+
		"set the pool's RuntimeParams[\"search_path\"] to pgstore.SearchPath(%q), which quotes it (PostgreSQL folds unquoted names to lower case)",
		setting, current.String, s.cfg.Schema, s.cfg.Schema)
}

func (s *Store) checkServer(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var syncCommit, fsync string
	err := s.pool.QueryRow(pctx, `SELECT current_setting('synchronous_commit'), current_setting('fsync')`).Scan(&syncCommit, &fsync)
	if err != nil {
		if perr := s.poolerError(err); perr != nil {
			return perr
		}
		if rerr := readOnlyError(err, s.addr()); rerr != nil {
			return rerr
		}
		return fmt.Errorf("pgstore: cannot reach PostgreSQL at %s: %w; check that the server runs and the connection string (IDEM_STORE) is right",
			s.addr(), redact(err))
	}
	if (syncCommit == "off" || fsync == "off") && !s.cfg.AllowUnsafeCommit {
		return fmt.Errorf("pgstore: %w (synchronous_commit=%s, fsync=%s): a crash would lose acknowledged messages; "+
			"set synchronous_commit=on and fsync=on, or accept the loss with Config.AllowUnsafeCommit (--allow-unsafe-commit)", ErrUnsafeCommit, syncCommit, fsync)
	}
	return nil
}

// addr is the host:port the pool connects to, for messages.
func (s *Store) addr() string {
	cc := s.pool.Config().ConnConfig
	return net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port)))
}

// poolerError explains the failures of a connection pooler in front of
// PostgreSQL, or returns nil for any other error. PgBouncer refuses the
// startup parameters Open sets: the error is a *poolerRefusal, on which
// Open connects again through the pooler (pooler.go). A pool given to New
// that caches prepared statements meets another client's through a pooler
// in transaction mode, which hands one server session to several clients.
func (s *Store) poolerError(err error) error {
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return nil
	}
	switch {
	case pe.Code == "08P01" && strings.HasPrefix(pe.Message, "unsupported startup parameter"):
		param := strings.TrimSpace(strings.TrimPrefix(pe.Message, "unsupported startup parameter:"))
		return &poolerRefusal{param: param, err: err, msg: fmt.Sprintf("pgstore: the server at %s refused the startup parameter %s (%v): it is a connection pooler such as PgBouncer, not PostgreSQL, and it does not pass on session settings. "+
			"pgstore.Open works through PgBouncer in transaction or session mode (pool_mode = transaction or session): it finds the pooler itself, names the schema in each statement and prepares none; "+
			"give a pool of your own to New only with PostgreSQL itself",
			s.addr(), param, redact(err))}
	case pe.Code == "42P05" || (pe.Code == "26000" && strings.Contains(pe.Message, "prepared statement")):
		return fmt.Errorf("pgstore: the server at %s reports %q (%w): the connections go through a pooler in transaction mode (PgBouncer pool_mode = transaction), "+
			"which gives one PostgreSQL session to several clients, so the statements pgx prepares and caches on a connection meet another client's. "+
			"Open the store with pgstore.Open and the pooler's URL, which finds the pooler and prepares no statement (pgx.QueryExecModeExec), with Config.DirectURL for the migrations and LISTEN; "+
			"a pool given to New needs a session of its own per connection: PostgreSQL directly, or PgBouncer's pool_mode = session",
			s.addr(), pe.Message, redact(err))
	}
	return nil
}

// SchemaVersion is the schema version this package migrates to.
func SchemaVersion() int { return sqlq.SchemaVersion(migrationFiles) }

// Migrate creates the schema and applies missing migrations, idempotently
// and safely against concurrent migrators (an advisory lock). Each wait
// for a table's lock is bounded by MigrateLockTimeout; a migration's
// indexes on big tables are built without blocking writers, after its
// transaction (see migrate.go).
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := loadMigrations()
	if err != nil {
		return fmt.Errorf("pgstore: read migrations: %w", err)
	}
	// The migration's session never goes back to the pool: closing it
	// drops the migration lock and the session settings the migrations
	// changed (search_path, lock_timeout), which a RESET would set to the
	// server's defaults rather than to what the pool's connections use.
	conn, err := s.migrationConn(ctx)
	if err != nil {
		return s.migrateError(err, 0)
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	if err := s.migrateLock(ctx, conn); err != nil {
		return s.migrateError(err, 0)
	}
	if err := s.migrateAll(ctx, conn, ms); err != nil {
		var current int
		_ = s.pool.QueryRow(context.WithoutCancel(ctx), `SELECT coalesce(max(version), 0) FROM idem_migrations`).Scan(&current)
		return s.migrateError(err, current)
	}
	return nil
}

func (s *Store) checkSchema(ctx context.Context) error {
	var current int
	err := s.pool.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM idem_migrations`).Scan(&current)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "42P01" { // undefined_table
		current, err = 0, nil
	}
	if err != nil {
		return fmt.Errorf("pgstore: check schema %s: %w", s.cfg.Schema, redact(err))
	}
	if want := SchemaVersion(); current < want {
		return fmt.Errorf("pgstore: %w: schema %s is at version %d, this Idem needs %d: run `idem migrate --store <url>` (or set Config.Migrate)",
			store.ErrNotMigrated, s.cfg.Schema, current, want)
	}
	return nil
}

// Schema returns the PostgreSQL schema holding the store's tables.
func (s *Store) Schema() string { return s.cfg.Schema }

// Pool returns the store's connection pool.
func (s *Store) Pool() *pgxpool.Pool { return s.pool }

// PoolSize returns how many connections the store's pool opens at most
// (store.PoolSizer). The engine refuses to start when its loops need more;
// the queue listener holds one of them while a Receive is running.
func (s *Store) PoolSize() int { return int(s.pool.Config().MaxConns) }

// RoundTrips returns how many round trips to the server the store has made
// (statements and pipelined batches), when it was made with Open; 0
// otherwise.
func (s *Store) RoundTrips() int64 {
	if s.trips == nil {
		return 0
	}
	return s.trips.n.Load()
}

// Statements returns how many SQL statements the store has sent to the
// server (each query, and each statement of a pipelined batch), when it was
// made with Open; 0 otherwise.
func (s *Store) Statements() int64 {
	if s.trips == nil {
		return 0
	}
	return s.trips.stmts.Load()
}

// Close stops the queue listener and, when the store made its own pool,
// closes it. Close is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.done)
		s.bgCancel()
		s.lmu.Lock()
		if s.lcancel != nil {
			s.lcancel()
		}
		s.lmu.Unlock()
		s.lwg.Wait()
		if s.ownsPool {
			s.pool.Close()
		}
	})
	return nil
}

func (s *Store) check(op string) error {
	if s.closed.Load() {
		return fmt.Errorf("pgstore: %s: %w", op, transport.ErrClosed)
	}
	return nil
}

// tripCounter counts round trips (one per query and one per batch) and
// statements (one per query and one per statement of a batch), and tells
// watch of the statements' errors (failover.go).
type tripCounter struct {
	n, stmts atomic.Int64
	watch    *sessionWatch
}

func (t *tripCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	t.n.Add(1)
	t.stmts.Add(1)
	return ctx
}
func (t *tripCounter) TraceQueryEnd(_ context.Context, c *pgx.Conn, d pgx.TraceQueryEndData) {
	if d.Err != nil && t.watch != nil {
		t.watch.saw(c, d.Err)
	}
}
func (t *tripCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	t.n.Add(1)
	return ctx
}
func (t *tripCounter) TraceBatchQuery(_ context.Context, c *pgx.Conn, d pgx.TraceBatchQueryData) {
	t.stmts.Add(1)
	if d.Err != nil && t.watch != nil {
		t.watch.saw(c, d.Err)
	}
}
func (t *tripCounter) TraceBatchEnd(_ context.Context, c *pgx.Conn, d pgx.TraceBatchEndData) {
	if d.Err != nil && t.watch != nil {
		t.watch.saw(c, d.Err)
	}
}

var passwordRE = regexp.MustCompile(`(://[^:/@]*:)[^@]*@`)

// directURLRE finds the value of DirectURLParam, a whole URL escaped in the
// query, password included, which passwordRE cannot see.
var directURLRE = regexp.MustCompile(DirectURLParam + `=[^&\s"']*`)

// redact removes passwords from connection errors, which pgx may quote.
func redact(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	if clean := passwordRE.ReplaceAllString(directURLRE.ReplaceAllString(msg, DirectURLParam+"=***"), "${1}***@"); clean != msg {
		return errors.New(clean)
	}
	if strings.Contains(msg, "password=") {
		return errors.New(regexp.MustCompile(`password=\S+`).ReplaceAllString(msg, "password=***"))
	}
	return err
}

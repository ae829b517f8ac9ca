package pgstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// A connection pooler in transaction mode (PgBouncer's pool_mode =
// transaction, often in front of managed PostgreSQL) gives a client a
// server session for one transaction at a time. Open finds one by its
// refusal of the startup parameters it sets (search_path, the TCP
// timeouts): PgBouncer refuses any it does not know, in every mode. It
// then connects again in the pooler's way:
//
//   - statements go in pgx's QueryExecModeExec (unnamed statements, parsed
//     and run in the same round trip, which PgBouncer 1.18 passes on; it
//     keeps no prepared statements across transactions), pipelined
//     batches and COPY included;
//   - no startup parameter but application_name (which PgBouncer keeps per
//     client and sets on the server session it lends), and the schema is
//     named in each statement instead of by search_path (poolersql.go);
//   - session settings only with SET LOCAL (set_config(…, true)), and no
//     session advisory lock: the migrations, which need one, run over
//     Config.DirectURL, and so does the queue's LISTEN, which a
//     transaction pooler cannot keep; without it the queue polls every
//     PollInterval and says so once.
//
// A pooler in statement mode, which refuses transactions of more than one
// statement, is refused with the setting to change.

// DirectURLParam is the query parameter of Open's connection string that
// gives Config.DirectURL (URL-escaped), for programs such as `idem
// torture --store` that take one connection string.
const DirectURLParam = "idem_direct_url"

// poolerRefusal is the error of a server that refused the startup
// parameters Open sets: a connection pooler such as PgBouncer.
type poolerRefusal struct {
	param string
	msg   string // what is wrong and what to do
	err   error
}

func (e *poolerRefusal) Error() string { return e.msg }

func (e *poolerRefusal) Unwrap() error { return e.err }

// splitDirectURL removes DirectURLParam from the URL rawURL and returns
// what remains and the parameter's value ("" without one). A key=value
// connection string is returned as it is.
func splitDirectURL(rawURL string) (rest, direct string, err error) {
	if !strings.Contains(rawURL, DirectURLParam) || !strings.Contains(rawURL, "://") {
		return rawURL, "", nil
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", "", fmt.Errorf("pgstore: parse connection string: %w (want postgres://user@host:port/db)", redact(err))
	}
	q := u.Query()
	direct = q.Get(DirectURLParam)
	q.Del(DirectURLParam)
	u.RawQuery = q.Encode()
	return u.String(), direct, nil
}

// openThroughPooler opens the store on the connection pooler at url,
// which refused Open's startup parameters.
func openThroughPooler(ctx context.Context, url string, c Config, refused *poolerRefusal) (*Store, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse connection string: %w", redact(err))
	}
	pc.MaxConns = c.MaxConns
	cc := pc.ConnConfig
	cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	cc.StatementCacheCapacity, cc.DescriptionCacheCapacity = 0, 0
	cc.RuntimeParams["application_name"] = ApplicationName(c.Schema)
	schema := c.Schema
	cc.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
		return &qualifyingConn{Conn: conn, schema: schema}, nil
	}
	trips := &tripCounter{}
	cc.Tracer = trips
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("pgstore: %w", redact(err))
	}
	c.viaPooler = true
	s, err := newStore(ctx, pool, c, trips, make(chan struct{}))
	if err != nil {
		pool.Close()
		return nil, err
	}
	s.ownsPool = true
	s.log.Info("connected through a connection pooler (it refused the startup parameter "+refused.param+"): statements name the schema and are not prepared; "+
		"set PgBouncer's idle_transaction_timeout to about Config.Lease, which bounds a client cut off inside a transaction",
		"schema", c.Schema, "direct_url", c.DirectURL != "")
	return s, nil
}

// checkPoolMode refuses a pooler in statement mode, which would refuse
// every unit of work (a transaction of several statements).
func (s *Store) checkPoolMode(ctx context.Context) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT 1`)
		return err
	})
	if err == nil {
		return nil
	}
	if strings.Contains(err.Error(), "statement pooling") || strings.Contains(err.Error(), "transaction blocks not allowed") {
		return fmt.Errorf("pgstore: the connection pooler at %s runs in statement mode and refuses transactions (%w): Idem commits each unit of work in one transaction; "+
			"set PgBouncer's pool_mode = transaction (or session) for Idem's database", s.addr(), redact(err))
	}
	return fmt.Errorf("pgstore: try a transaction through the pooler at %s: %w", s.addr(), redact(err))
}

// directConfig parses Config.DirectURL for a connection of its own to
// PostgreSQL, with search_path set to the schema and the other settings
// Open gives its connections.
func (s *Store) directConfig() (*pgx.ConnConfig, error) {
	cc, err := pgx.ParseConfig(s.cfg.DirectURL)
	if err != nil {
		return nil, fmt.Errorf("pgstore: parse Config.DirectURL: %w (want postgres://user@host:port/db of PostgreSQL itself, not of the pooler)", redact(err))
	}
	cc.RuntimeParams["search_path"] = SearchPath(s.cfg.Schema)
	cc.RuntimeParams["application_name"] = ApplicationName(s.cfg.Schema)
	for k, v := range sessionParams(s.cfg.Lease) {
		cc.RuntimeParams[k] = v
	}
	connReadWrite(cc, s.cfg.DirectURL) // a standby can neither LISTEN nor migrate
	return cc, nil
}

// directConn connects to Config.DirectURL.
func (s *Store) directConn(ctx context.Context) (*pgx.Conn, error) {
	cc, err := s.directConfig()
	if err != nil {
		return nil, err
	}
	conn, err := pgx.ConnectConfig(ctx, cc)
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "08P01" && strings.HasPrefix(pe.Message, "unsupported startup parameter") {
		return nil, fmt.Errorf("pgstore: Config.DirectURL is a connection pooler, not PostgreSQL: it refused the startup parameter %s (%w); give the URL of PostgreSQL itself (its host and port, usually 5432)",
			strings.TrimPrefix(pe.Message, "unsupported startup parameter: "), redact(err))
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: connect to Config.DirectURL: %w", redact(err))
	}
	return conn, nil
}

// migrationConn returns the session the migrations run on: one taken out
// of the pool for good, or, through a pooler, a connection of its own to
// Config.DirectURL (a migration holds a session advisory lock, and sets
// search_path and lock_timeout for the session). The caller closes it.
func (s *Store) migrationConn(ctx context.Context) (*pgx.Conn, error) {
	if !s.cfg.viaPooler {
		pooled, err := s.pool.Acquire(ctx)
		if err != nil {
			return nil, err
		}
		return pooled.Hijack(), nil
	}
	if s.cfg.DirectURL == "" {
		return nil, errMigrateThroughPooler
	}
	return s.directConn(ctx)
}

// errMigrateThroughPooler refuses a migration through a pooler without a
// direct URL.
var errMigrateThroughPooler = errors.New("the store connects through a connection pooler in transaction mode (PgBouncer), and a migration needs a session of its own (a session advisory lock, search_path, lock_timeout): " +
	"give the URL of PostgreSQL itself as Config.DirectURL (or as the " + DirectURLParam + " parameter of the connection string, URL-escaped), " +
	"or run `idem migrate --store <url of PostgreSQL, not of the pooler>`")

// withDirectURL takes DirectURLParam out of url into c.DirectURL, which
// it does not replace when set.
func withDirectURL(url string, c *Config) (string, error) {
	rest, direct, err := splitDirectURL(url)
	if err != nil {
		return "", err
	}
	if c.DirectURL == "" {
		c.DirectURL = direct
	}
	if c.DirectURL != "" {
		if _, err := pgx.ParseConfig(c.DirectURL); err != nil {
			return "", fmt.Errorf("pgstore: parse Config.DirectURL (or %s): %w (want postgres://user@host:port/db of PostgreSQL itself, not of the pooler)", DirectURLParam, redact(err))
		}
	}
	return rest, nil
}

// openPooled finishes newStore through a pooler: it refuses statement
// mode, migrates over Config.DirectURL when Config.Migrate is set, and
// checks the schema's version.
func (s *Store) openPooled(ctx context.Context) error {
	if err := s.checkPoolMode(ctx); err != nil {
		return err
	}
	if s.cfg.Migrate {
		return s.Migrate(ctx)
	}
	return s.checkSchema(ctx)
}

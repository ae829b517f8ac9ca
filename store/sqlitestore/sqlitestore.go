package sqlitestore

import (
	"bytes"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

//go:embed migrations/*.sql
var migrationFiles embed.FS

var (
	_ store.Store           = (*Store)(nil)
	_ store.SingleWriter    = (*Store)(nil)
	_ store.Queue           = (*Store)(nil)
	_ store.UnitOfWork      = (*unitOfWork)(nil)
	_ store.QueueUnitOfWork = (*unitOfWork)(nil)

	_ transport.PendingCounter = (*Store)(nil)
)

// Config configures a Store. The zero value means the defaults.
type Config struct {
	// SkipMigrate makes Open refuse a database that is missing or whose
	// schema is older than this package, instead of creating or migrating
	// it. By default Open migrates, as the user of an embedded database
	// expects; set SkipMigrate where `idem migrate` is a separate step.
	SkipMigrate bool
	// Lease is the queue's visibility timeout: a delivery not settled within
	// it is handed out again. Default 30s.
	Lease time.Duration
	// PollInterval bounds how long an idle consumer waits before looking at
	// the queue again. Messages published through this Store wake its
	// consumers at once; the poll finds those written by other processes.
	// Default 250ms.
	PollInterval time.Duration
	// BusyTimeout is how long a statement waits for a lock that another
	// connection or process holds before it fails. Default 5s.
	BusyTimeout time.Duration
	// Logger receives the store's logs. Nil means slog.Default().
	Logger *slog.Logger
}

func (c *Config) withDefaults() (Config, error) {
	var out Config
	if c != nil {
		out = *c
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Lease", out.Lease}, {"PollInterval", out.PollInterval}, {"BusyTimeout", out.BusyTimeout}} {
		if f.d < 0 {
			return out, fmt.Errorf("sqlitestore: Config.%s is %v: must not be negative (0 means the default)", f.name, f.d)
		}
	}
	if out.Lease == 0 {
		out.Lease = 30 * time.Second
	}
	if out.PollInterval == 0 {
		out.PollInterval = 250 * time.Millisecond
	}
	if out.BusyTimeout == 0 {
		out.BusyTimeout = 5 * time.Second
	}
	if out.BusyTimeout < time.Millisecond {
		return out, fmt.Errorf("sqlitestore: Config.BusyTimeout is %v: want at least 1ms", out.BusyTimeout)
	}
	if out.Logger == nil {
		out.Logger = slog.Default()
	}
	return out, nil
}

// Store is a SQLite store.Store and transport.Transport in one database
// file. It is safe for concurrent use, and several Stores (in one process or
// several) may open one file. Create it with Open; the zero value is not
// usable.
type Store struct {
	cfg  Config
	path string
	log  *slog.Logger
	// fairIndexes builds the indexes of fair receives once.
	fairIndexes sync.Once

	rdb *sql.DB // readers: query_only connections, several at once
	// loadInstance and loadInbox are prepared on rdb; each reader
	// connection prepares them once.
	loadInstance, loadInbox *sql.Stmt
	wdb                     *sql.DB // the one writing connection
	wconn                   *sql.Conn
	stmts                   map[string]*sql.Stmt // prepared on wconn; used by the writer only

	writes     chan *writeReq // unbuffered: waiting senders form the next group
	writerDone chan struct{}
	commits    atomic.Int64 // write transactions committed, for tests

	closeOnce sync.Once
	closed    atomic.Bool
	done      chan struct{} // closed by Close

	wmu  sync.Mutex
	wake chan struct{} // closed and replaced when the queue gains visible rows
}

// sqliteHeader starts every SQLite database file.
var sqliteHeader = []byte("SQLite format 3\x00")

// Open opens the SQLite database at path, creating the file when it does
// not exist, and migrates its schema unless cfg.SkipMigrate is set. It
// puts the database in WAL mode and makes every commit durable
// (synchronous=FULL) before Commit, Publish, Ack or Nack return. It refuses,
// with an error saying what to do, a path whose directory is missing or not
// writable, a file that is not a SQLite database, and a schema newer than
// this package. cfg may be nil.
func Open(ctx context.Context, path string, cfg *Config) (*Store, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	abs, err := checkPath(path, c.SkipMigrate)
	if err != nil {
		return nil, err
	}
	s := &Store{
		cfg:        c,
		path:       abs,
		log:        c.Logger.With("component", "idem.sqlitestore"),
		stmts:      map[string]*sql.Stmt{},
		writes:     make(chan *writeReq),
		writerDone: make(chan struct{}),
		done:       make(chan struct{}),
		wake:       make(chan struct{}),
	}
	if err := s.open(ctx); err != nil {
		s.closeDBs()
		return nil, err
	}
	go s.writeLoop()
	return s, nil
}

// checkPath refuses, before SQLite sees it, a path SQLite would fail on
// with a less helpful message, and returns it made absolute.
func checkPath(path string, mustExist bool) (string, error) {
	switch {
	case path == "":
		return "", errors.New("sqlitestore: open: empty path: give the database file's path, for example ./idem.db")
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return "", fmt.Errorf("sqlitestore: open %q: want a file system path, not a SQLite URI or an in-memory database (use memstore for a store in memory)", path)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	dir := filepath.Dir(abs)
	st, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", fmt.Errorf("sqlitestore: open %s: directory %s does not exist: create it (mkdir -p %s) or choose another path", path, dir, dir)
	case err != nil:
		return "", fmt.Errorf("sqlitestore: open %s: %w", path, err)
	case !st.IsDir():
		return "", fmt.Errorf("sqlitestore: open %s: %s is not a directory", path, dir)
	}
	// SQLite creates the database and its -wal and -shm files beside it.
	probe, err := os.CreateTemp(dir, ".idem-write-check-*")
	if err != nil {
		return "", fmt.Errorf("sqlitestore: open %s: directory %s is not writable (%v): SQLite creates the database and its -wal and -shm files there; fix the permissions or choose another path", path, dir, pathErr(err))
	}
	probe.Close()
	os.Remove(probe.Name())

	f, err := os.OpenFile(abs, os.O_RDWR, 0)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if mustExist {
			return "", fmt.Errorf("sqlitestore: open %s: %w: no database at this path; run `idem migrate` first or leave Config.SkipMigrate off", path, store.ErrNotMigrated)
		}
		return abs, nil
	case err != nil:
		if st, serr := os.Stat(abs); serr == nil && st.IsDir() {
			return "", fmt.Errorf("sqlitestore: open %s: is a directory: give the path of a database file inside it, for example %s", path, filepath.Join(path, "idem.db"))
		}
		return "", fmt.Errorf("sqlitestore: open %s: the file is not writable (%v): fix its permissions", path, pathErr(err))
	}
	defer f.Close()
	head := make([]byte, len(sqliteHeader))
	n, err := io.ReadFull(f, head)
	if n == 0 && errors.Is(err, io.EOF) {
		return abs, nil // an empty file is a new database to SQLite
	}
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return "", fmt.Errorf("sqlitestore: open %s: %w", path, err)
	}
	if !bytes.Equal(head[:n], sqliteHeader) {
		return "", fmt.Errorf("sqlitestore: open %s: not a SQLite database (the file does not start with the SQLite header): point the store at an Idem database or at a new path", path)
	}
	return abs, nil
}

// pathErr drops the path from a file system error, which the message
// names already.
func pathErr(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// dsn returns the driver's name for the database: a file: URI (so that any
// character in the path is safe) with the connection's pragmas.
func (s *Store) dsn(readers bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", s.cfg.BusyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous(FULL)")
	if readers {
		q.Add("_pragma", "query_only(1)")
	}
	p := filepath.ToSlash(s.path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p // a Windows drive letter
	}
	u := url.URL{Scheme: "file", Path: p, RawQuery: q.Encode()}
	return u.String()
}

func (s *Store) open(ctx context.Context) error {
	var err error
	if s.wdb, err = sql.Open("sqlite", s.dsn(false)); err != nil {
		return fmt.Errorf("sqlitestore: open %s: %w", s.path, err)
	}
	s.wdb.SetMaxOpenConns(1)
	s.wdb.SetMaxIdleConns(1)
	s.wdb.SetConnMaxLifetime(0)
	if s.wconn, err = s.wdb.Conn(ctx); err != nil {
		return s.openErr(err)
	}
	mode, err := SetWAL(ctx, s.wconn, s.cfg.BusyTimeout)
	if err != nil {
		return s.openErr(err)
	}
	if !strings.EqualFold(mode, "wal") {
		return fmt.Errorf("sqlitestore: open %s: the database stays in journal mode %q, not WAL: SQLite needs shared memory beside the file, which network file systems often lack; put the database on a local disk", s.path, mode)
	}
	var syncMode int
	if err := s.wconn.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&syncMode); err != nil {
		return s.openErr(err)
	}
	if syncMode < 2 {
		return fmt.Errorf("sqlitestore: open %s: synchronous is %d, not FULL (2): commits would not be durable", s.path, syncMode)
	}
	if err := s.migrate(ctx); err != nil {
		return err
	}
	if s.rdb, err = sql.Open("sqlite", s.dsn(true)); err != nil {
		return fmt.Errorf("sqlitestore: open %s: %w", s.path, err)
	}
	s.rdb.SetMaxOpenConns(max(4, 2*runtime.GOMAXPROCS(0)))
	s.rdb.SetMaxIdleConns(max(4, 2*runtime.GOMAXPROCS(0)))
	if s.loadInstance, err = s.rdb.PrepareContext(ctx, loadInstanceSQL); err != nil {
		return s.openErr(err)
	}
	if s.loadInbox, err = s.rdb.PrepareContext(ctx, loadInboxSQL); err != nil {
		return s.openErr(err)
	}
	return nil
}

// SetWAL switches the SQLite database that db is open on to WAL mode and
// returns the journal mode it is in afterwards: "wal", or the old mode on
// a file system without the shared memory that WAL needs. When several
// processes open a new file at once, SQLite answers the switch with
// SQLITE_BUSY at once, without waiting in its busy handler: SetWAL tries
// again until timeout has passed or ctx is done. Open does this for the
// Store's own connections. Call SetWAL for a *sql.DB of the application's
// on a database that other processes may create at the same moment,
// instead of a journal_mode(WAL) pragma in its DSN.
func SetWAL(ctx context.Context, db interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for pause := time.Millisecond; ; pause = min(2*pause, 100*time.Millisecond) {
		var mode string
		err := db.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode)
		var se *sqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return mode, err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", ctx.Err()
		case <-t.C:
		}
	}
}

// openErr explains the errors SQLite gives for a file it cannot use.
func (s *Store) openErr(err error) error {
	var se *sqlite.Error
	if errors.As(err, &se) {
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_NOTADB:
			return fmt.Errorf("sqlitestore: open %s: not a SQLite database (%v): point the store at an Idem database or at a new path", s.path, err)
		case sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PERM:
			return fmt.Errorf("sqlitestore: open %s: %v: the file and its directory must be readable and writable", s.path, err)
		case sqlite3.SQLITE_BUSY:
			return fmt.Errorf("sqlitestore: open %s: %v: another process held a lock for longer than Config.BusyTimeout (%v)", s.path, err, s.cfg.BusyTimeout)
		}
	}
	return fmt.Errorf("sqlitestore: open %s: %w", s.path, err)
}

// SchemaVersion is the schema version this package migrates to.
func SchemaVersion() int { return sqlq.SchemaVersion(migrationFiles) }

const createMigrationsSQL = `
CREATE TABLE IF NOT EXISTS idem_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT    NOT NULL,
    applied_at INTEGER NOT NULL
) STRICT`

// migrate applies missing migrations in one immediate transaction (so that
// concurrent openers take turns) or, with SkipMigrate, checks that none is
// missing. Either way it refuses a schema newer than this package.
func (s *Store) migrate(ctx context.Context) error {
	names, bodies, err := sqlq.Migrations(migrationFiles)
	if err != nil {
		return fmt.Errorf("sqlitestore: read migrations: %w", err)
	}
	want := len(names)
	if s.cfg.SkipMigrate {
		current, err := s.schemaVersion(ctx)
		if err != nil {
			return s.openErr(err)
		}
		if err := s.checkVersion(current, want); err != nil {
			return err
		}
		if current < want {
			return fmt.Errorf("sqlitestore: open %s: %w: the schema is at version %d, this Idem needs %d: run `idem migrate` or leave Config.SkipMigrate off",
				s.path, store.ErrNotMigrated, current, want)
		}
		return nil
	}
	c := s.wconn
	if _, err := c.ExecContext(ctx, `BEGIN IMMEDIATE`); err != nil {
		return s.openErr(err)
	}
	committed := false
	defer func() {
		if !committed {
			_, _ = c.ExecContext(context.WithoutCancel(ctx), `ROLLBACK`)
		}
	}()
	if _, err := c.ExecContext(ctx, createMigrationsSQL); err != nil {
		return s.openErr(err)
	}
	var current int
	if err := c.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM idem_migrations`).Scan(&current); err != nil {
		return s.openErr(err)
	}
	if err := s.checkVersion(current, want); err != nil {
		return err
	}
	for i := current; i < want; i++ {
		if _, err := c.ExecContext(ctx, bodies[i]); err != nil {
			return fmt.Errorf("sqlitestore: migrate %s: %s: %w", s.path, names[i], err)
		}
		if _, err := c.ExecContext(ctx, `INSERT INTO idem_migrations (version, name, applied_at) VALUES (?, ?, ?)`, i+1, filepath.Base(names[i]), micros(time.Now())); err != nil {
			return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
		}
	}
	if _, err := c.ExecContext(ctx, `COMMIT`); err != nil {
		return fmt.Errorf("sqlitestore: migrate %s: %w", s.path, err)
	}
	committed = true
	if current < want {
		s.log.InfoContext(ctx, "migrated database schema", "path", s.path, "from_version", current, "to_version", want)
	}
	return nil
}

func (s *Store) schemaVersion(ctx context.Context) (int, error) {
	var n int
	err := s.wconn.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = 'idem_migrations'`).Scan(&n)
	if err != nil || n == 0 {
		return 0, err
	}
	var current int
	err = s.wconn.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM idem_migrations`).Scan(&current)
	return current, err
}

func (s *Store) checkVersion(current, want int) error {
	if current > want {
		return fmt.Errorf("sqlitestore: open %s: %w: the schema is at version %d, this Idem knows up to %d: upgrade Idem to the version that migrated this file",
			s.path, store.ErrSchemaTooNew, current, want)
	}
	return nil
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Close finishes the writes in progress, makes every later call fail with
// an error wrapping transport.ErrClosed (blocked Receive calls return it at
// once) and closes the database. Close is idempotent.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.done)
		<-s.writerDone
		err = s.closeDBs()
	})
	return err
}

func (s *Store) closeDBs() error {
	var errs []error
	for _, st := range s.stmts {
		errs = append(errs, st.Close())
	}
	for _, st := range []*sql.Stmt{s.loadInstance, s.loadInbox} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	if s.wconn != nil {
		errs = append(errs, s.wconn.Close())
	}
	if s.wdb != nil {
		errs = append(errs, s.wdb.Close())
	}
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqlitestore: close %s: %w", s.path, err)
	}
	return nil
}

func (s *Store) check(op string) error {
	if s.closed.Load() {
		return fmt.Errorf("sqlitestore: %s: %w", op, transport.ErrClosed)
	}
	return nil
}

// micros and fromMicros convert times to and from the stored form:
// microseconds since the Unix epoch, UTC.
func micros(t time.Time) int64 { return t.UnixMicro() }

func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// nullMicros stores the zero time as NULL.
func nullMicros(t time.Time) sql.NullInt64 {
	if t.IsZero() {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: t.UnixMicro(), Valid: true}
}

func fromNullMicros(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return fromMicros(n.Int64)
}

// SingleWriter marks the store as writing through one connection
// (store.SingleWriter): an engine on it defaults to one consumer.
func (s *Store) SingleWriter() {}

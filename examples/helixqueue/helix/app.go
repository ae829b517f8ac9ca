// Package helix is HelixQueue rebuilt on Idem: sequencing batches assigned
// to GPU workers, one saga per batch (keyed by its canonical sample ID),
// Redis Streams as the transport, SQLite or PostgreSQL as the store, and an
// audit row written in the same transaction as every state change. See
// examples/helixqueue/README.md.
package helix

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport/redisstreams"
)

// Options configures Open.
type Options struct {
	// Store is a SQLite path or a postgres:// URL.
	Store string
	// Schema is the PostgreSQL schema of the engine's and the example's
	// tables. Default "helixqueue".
	Schema string
	// Redis is the redis:// URL of the transport.
	Redis string
	// Namespace names the Redis streams. Default: DefaultNamespace of
	// Store and Schema, so that processes on one store share the streams
	// and processes on different stores never take each other's messages.
	Namespace string
	// Machine configures the batch saga (lease, fault injection).
	Machine MachineConfig
	// TimerInterval is how often the engine looks for due timers (the
	// lease reaper). Default 200ms.
	TimerInterval time.Duration
	// DeliveryLease is the Redis lease of a delivery: a consumer that dies
	// holding one loses it after this long, and another takes it over.
	// Default 30s.
	DeliveryLease time.Duration
	// MaxLeaseRenewal is how long a process that is still running a batch
	// keeps renewing its leases (idem.Config.MaxLeaseRenewal): past it, a
	// process that hangs loses the batch to another. Default ten leases.
	MaxLeaseRenewal time.Duration
	// AllowLossOnCrash accepts a Redis server without appendfsync always
	// (see redisstreams.Config).
	AllowLossOnCrash bool
	// Logger receives the logs of the engine, the transport and the batch
	// saga (unless Machine.Logger is set). Nil means slog.Default().
	Logger *slog.Logger
}

// Records is the read side of HelixQueue: the engine's store (sagas and
// their journal) and the example's tables, without a transport or an
// engine, so reading them consumes nothing. App embeds it.
type Records struct {
	// Store is the engine's store (sagas, inbox, timers, journal).
	Store store.Store
	// DB reads the example's tables on the same database.
	DB     *DB
	closed bool
}

// OpenRecords opens an existing store and the example's tables for
// reading: what "helixqueue audit" reads. It needs o.Store (and o.Schema
// on PostgreSQL), not Redis. It creates and migrates nothing: a store that
// does not exist, or has none of the example's tables, is an error that
// says so (wrapping ErrNoStore).
func OpenRecords(ctx context.Context, o Options) (r *Records, err error) {
	if o.Store == "" {
		return nil, errors.New("helixqueue: --store is required")
	}
	return openRecords(ctx, o.withDefaults(), false)
}

// ErrNoStore is wrapped by OpenRecords's error when its store does not
// exist or holds no HelixQueue tables.
var ErrNoStore = errors.New("no HelixQueue store")

// openRecords opens the store and the example's tables, creating and
// migrating them when create is set.
func openRecords(ctx context.Context, o Options, create bool) (r *Records, err error) {
	r = &Records{}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	if r.Store, err = openStore(ctx, o, create); errors.Is(err, store.ErrNotMigrated) || errors.Is(err, ErrNoStore) {
		return r, noStore(o)
	}
	if err != nil {
		return r, fmt.Errorf("helixqueue: open store: %w", err)
	}
	if r.DB, err = openDB(ctx, o.Store, o.Schema, create); errors.Is(err, ErrNoStore) {
		return r, noStore(o)
	}
	return r, err
}

// openStore opens o's store, migrating it when create is set. Its store is
// nil with an error (never a nil *pgstore.Store in a non-nil interface).
func openStore(ctx context.Context, o Options, create bool) (store.Store, error) {
	if isPostgres(o.Store) {
		st, err := pgstore.Open(ctx, o.Store, &pgstore.Config{Schema: o.Schema, Migrate: create})
		if err != nil {
			return nil, err
		}
		return st, nil
	}
	if err := sqliteExists(o.Store, create); err != nil {
		return nil, err
	}
	st, err := sqlitestore.Open(ctx, o.Store, &sqlitestore.Config{SkipMigrate: !create})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// sqliteExists returns ErrNoStore when there is no file at path and
// create is not set: SQLite would create one.
func sqliteExists(path string, create bool) error {
	if create {
		return nil
	}
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		return ErrNoStore
	}
	return nil
}

// noStore says that o names no HelixQueue store, and what to check.
func noStore(o Options) error {
	if isPostgres(o.Store) {
		return fmt.Errorf("helixqueue: %w in schema %q of %s: audit only reads; check --store and --schema", ErrNoStore, o.Schema, redactURL(o.Store))
	}
	return fmt.Errorf("helixqueue: %w at %s: audit only reads; check --store", ErrNoStore, o.Store)
}

// Journal returns the engine's journal of the batch: each applied message
// with its raw sample ID (RawKey, empty when it is the canonical key) and
// the canonical key.
func (r *Records) Journal(ctx context.Context, sample string) ([]store.JournalEntry, error) {
	k, err := CanonicalID(sample)
	if err != nil {
		return nil, err
	}
	return r.Store.Journal(ctx, store.Key{SagaType: SagaType, Key: k})
}

// Close closes the store and the tables' database.
func (r *Records) Close() {
	if r == nil || r.closed {
		return
	}
	r.closed = true
	if r.DB != nil {
		r.DB.Close()
	}
	if r.Store != nil {
		r.Store.Close()
	}
}

// App is one HelixQueue process: its store, transport, engine and tables.
type App struct {
	*Records
	// Engine runs the batch saga; Open does not start it.
	Engine    *idem.Engine
	tr        *redisstreams.Transport
	namespace string
	closed    bool
}

// DefaultNamespace returns the Redis namespace of the processes on a store
// (a SQLite path or a postgres:// URL, and the PostgreSQL schema):
// "helixqueue-" and a hash of the store's identity. The identity of a
// SQLite file is its absolute path; that of a PostgreSQL store is the
// server, the database and the schema, not the user or the password.
func DefaultNamespace(storeDSN, schema string) (string, error) {
	var id string
	if isPostgres(storeDSN) {
		cc, err := pgx.ParseConfig(storeDSN)
		if err != nil {
			return "", fmt.Errorf("helixqueue: parse %q: %w", redactURL(storeDSN), err)
		}
		if schema == "" {
			schema = "helixqueue"
		}
		id = fmt.Sprintf("postgres://%s:%d/%s?schema=%s", cc.Host, cc.Port, cc.Database, schema)
	} else {
		abs, err := filepath.Abs(storeDSN)
		if err != nil {
			return "", fmt.Errorf("helixqueue: store %s: %w", storeDSN, err)
		}
		if dir, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
			abs = filepath.Join(dir, filepath.Base(abs))
		}
		id = "sqlite:" + abs
	}
	sum := sha256.Sum256([]byte(id))
	return "helixqueue-" + hex.EncodeToString(sum[:6]), nil
}

// Namespace returns the Redis namespace of a's streams.
func (a *App) Namespace() string { return a.namespace }

func (o Options) withDefaults() Options {
	if o.Schema == "" {
		o.Schema = "helixqueue"
	}
	if o.TimerInterval <= 0 {
		o.TimerInterval = 200 * time.Millisecond
	}
	if o.DeliveryLease <= 0 {
		o.DeliveryLease = 30 * time.Second
	}
	return o
}

// Open opens the store (migrating it), the example's tables, the Redis
// transport, and an engine with the batch saga registered. The engine is
// not started: until Engine.Start it consumes nothing, and Publish (not
// Submit or TryAssign, which wait for a consumer) works without it.
func Open(ctx context.Context, o Options) (a *App, err error) {
	if o.Store == "" || o.Redis == "" {
		return nil, errors.New("helixqueue: --store and --redis are required")
	}
	o = o.withDefaults()
	if o.Namespace == "" {
		if o.Namespace, err = DefaultNamespace(o.Store, o.Schema); err != nil {
			return nil, err
		}
	}
	a = &App{namespace: o.Namespace}
	defer func() {
		if err != nil {
			a.Close()
		}
	}()
	if a.Records, err = openRecords(ctx, o, true); err != nil {
		return a, err
	}
	a.tr, err = redisstreams.Open(ctx, o.Redis, &redisstreams.Config{
		Namespace: o.Namespace, Lease: o.DeliveryLease, PollInterval: 100 * time.Millisecond,
		AllowLossOnCrash: o.AllowLossOnCrash, Logger: o.Logger,
	})
	if err != nil {
		return a, fmt.Errorf("helixqueue: open redis: %w", err)
	}
	a.Engine, err = idem.NewEngine(a.Store, a.tr, &idem.Config{TimerInterval: o.TimerInterval, Lanes: 4, Logger: o.Logger, MaxLeaseRenewal: o.MaxLeaseRenewal})
	if err != nil {
		return a, err
	}
	if o.Machine.Logger == nil {
		o.Machine.Logger = o.Logger
	}
	if err := a.Engine.Register(NewMachine(o.Machine)); err != nil {
		return a, err
	}
	return a, nil
}

// Pending returns the Redis messages handed out but not acknowledged.
func (a *App) Pending(ctx context.Context) (int, error) {
	_, unacked, err := a.tr.Pending(ctx)
	return unacked, err
}

// Close closes what Open opened (stop the engine first).
func (a *App) Close() {
	if a == nil || a.closed {
		return
	}
	a.closed = true
	if a.tr != nil {
		a.tr.Close()
	}
	a.Records.Close()
}

// submission is the envelope of a batch's submission for the raw sample ID,
// with its canonical ID. Its envelope ID derives from the raw bytes.
func submission(raw string) (idem.Envelope, string, error) {
	canonical, err := CanonicalID(raw)
	if err != nil {
		return idem.Envelope{}, "", err
	}
	env, err := idem.NewEnvelope("submit-"+hashHex(raw), Submitted{SampleID: raw})
	return env, canonical, err
}

// Publish publishes a batch's submission for the raw sample ID and returns
// its canonical ID without waiting for a consumer to apply it: what
// "helixqueue submit" does, on an engine it never starts (so the process
// neither joins the consumer group nor takes a delivery). As with Submit, a
// resubmission of the same bytes is one message, and a twin another
// message to the same batch.
func (a *App) Publish(ctx context.Context, raw string) (canonical string, err error) {
	env, canonical, err := submission(raw)
	if err != nil {
		return "", err
	}
	if err := a.Engine.Publish(ctx, env); err != nil {
		return "", fmt.Errorf("helixqueue: submit %q: %w", raw, err)
	}
	return canonical, nil
}

// Submit publishes a batch for the raw sample ID and waits until a consumer
// (this process's started engine, or another's) applied it. Its envelope
// ID derives from the raw bytes, so a resubmission of the same bytes is one message;
// a twin (another spelling of the same canonical ID) is another message to
// the same saga, which records its spelling and changes nothing else.
func (a *App) Submit(ctx context.Context, raw string) (canonical string, err error) {
	env, canonical, err := submission(raw)
	if err != nil {
		return "", err
	}
	if _, err := a.Engine.PublishAndWait(ctx, env); err != nil {
		return "", fmt.Errorf("helixqueue: submit %q: %w", raw, err)
	}
	return canonical, nil
}

// AssignResult is what one assignment request got.
type AssignResult struct {
	// Won is true when this call got the assignment.
	Won bool
	// Attempt is the batch's current attempt (this call's when Won).
	Attempt int
	// State is the batch's state once the request was applied.
	State string
}

// TryAssign asks for the batch for worker and reports whether this call won
// the assignment.
func (a *App) TryAssign(ctx context.Context, sample, worker string) (AssignResult, error) {
	req := newID()
	env, err := idem.NewEnvelope("assign-"+req, Assign{SampleID: sample, Worker: worker, Request: req})
	if err != nil {
		return AssignResult{}, err
	}
	r, err := a.Engine.PublishAndWait(ctx, env)
	if err != nil {
		return AssignResult{}, fmt.Errorf("helixqueue: assign %q: %w", sample, err)
	}
	b, err := decodeBatch(r.Data)
	if err != nil {
		return AssignResult{}, err
	}
	return AssignResult{Won: b.Request == req, Attempt: b.Attempt, State: r.State}, nil
}

// send applies msg under a fresh envelope ID and returns the saga's state.
func (a *App) send(ctx context.Context, prefix string, msg any) (idem.Result, error) {
	env, err := idem.NewEnvelope(prefix+"-"+newID(), msg)
	if err != nil {
		return idem.Result{}, err
	}
	r, err := a.Engine.PublishAndWait(ctx, env)
	if err != nil {
		return r, fmt.Errorf("helixqueue: %s: %w", prefix, err)
	}
	return r, nil
}

func newID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

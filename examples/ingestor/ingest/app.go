// Package ingest is the Ingestor import service built on Idem: delivery
// advice files (CSV or JSON) are uploaded over HTTP, validated, split into
// chunks and imported by sagas with exactly-once effects.
//
// Two sagas do the work. The job saga (JobMachine) is created by the
// upload's ImportRequested message, whose deduplication identity is the
// SHA-256 of the file bytes and the supplier code; its first transition
// validates the file and emits one ChunkRequested per chunk, committed with
// the new job (the transactional outbox of the reference system, for
// free). Each chunk saga (ChunkMachine) imports its lines into its own
// state, in the same commit as the inbox record that makes the import
// happen once, and reports ChunkDone to the job. A chunk whose lines break
// a business rule fails on its own; the job ends PartiallySucceeded with
// the failed chunks listed, and a requeue re-runs only those.
//
// The audit trail is Idem's saga journal, appended by the engine in the
// same transaction as each transition, joined with the detail the job
// records for each message (Job.Outcomes).
package ingest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// Config configures an App. The zero value means the defaults.
type Config struct {
	// ChunkSize is how many lines one chunk holds. Default 500.
	ChunkSize int
	// MaxFileBytes is the largest file accepted. Default 16 MiB.
	MaxFileBytes int
	// Depots are the onboarded depots. Nil means DefaultDepots.
	Depots *Depots
	// Rules, when set, replaces DepotRules(Depots, nil) as the chunk rules.
	Rules ChunkRules
	// ConfirmWait is how long an upload waits for a worker to create its
	// job before answering 202 Accepted. Default 5s.
	ConfirmWait time.Duration
	// Engine is the base engine configuration (nil means the defaults);
	// MaxBodyBytes is raised to MaxMessageBytes(MaxFileBytes), and to what
	// a chunk of ChunkSize lines may take.
	Engine *idem.Config
	// Logger receives the app's and the engine's logs. Nil means
	// slog.Default().
	Logger *slog.Logger
}

// App is the Ingestor: its sagas on one Idem engine, and its API. Create
// it with New; Start it to run the worker role. Methods are safe for
// concurrent use.
type App struct {
	cfg   Config
	st    store.Store
	eng   *idem.Engine
	job   *saga.Machine[Job]
	chunk *saga.Machine[Chunk]
	log   *slog.Logger
}

// New builds the app on q, a store that is also its queue (sqlitestore or
// pgstore). It does not start the worker: call Start for that.
func New(q store.Queue, cfg *Config) (*App, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if c.ChunkSize <= 0 {
		c.ChunkSize = 500
	}
	if c.MaxFileBytes <= 0 {
		c.MaxFileBytes = 16 << 20
	}
	if c.Depots == nil {
		c.Depots = NewDepots(DefaultDepots...)
	}
	if c.Rules == nil {
		c.Rules = DepotRules(c.Depots, nil)
	}
	if c.ConfirmWait <= 0 {
		c.ConfirmWait = 5 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	var ec idem.Config
	if c.Engine != nil {
		ec = *c.Engine
	}
	if ec.Logger == nil {
		ec.Logger = c.Logger
	}
	ec.MaxBodyBytes = max(ec.MaxBodyBytes, MaxMessageBytes(c.MaxFileBytes), maxChunkBytes(c.ChunkSize))
	eng, err := idem.NewEngine(q, q, &ec)
	if err != nil {
		return nil, err
	}
	a := &App{cfg: c, st: q, eng: eng, job: JobMachine(), chunk: ChunkMachine(c.Rules), log: c.Logger.With("component", "ingestor")}
	if err := eng.Register(a.job); err != nil {
		return nil, err
	}
	if err := eng.Register(a.chunk); err != nil {
		return nil, err
	}
	return a, nil
}

// MaxMessageBytes is the largest ImportRequested body for a file of at most
// maxFileBytes: the file travels base64-encoded (4 bytes for every 3,
// rounded up), and the other fields (ids, supplier code, file name) fit in
// 64 KiB. New raises the engine's MaxBodyBytes to it.
func MaxMessageBytes(maxFileBytes int) int {
	return 4*((maxFileBytes+2)/3) + 64<<10
}

// maxLineJSON bounds one Line as JSON: its field names and numbers, a date,
// and three fields of MaxFieldBytes that JSON escaping may grow sixfold.
const maxLineJSON = 160 + 3*6*MaxFieldBytes

// maxChunkBytes bounds a chunk of chunkSize lines as a message.
func maxChunkBytes(chunkSize int) int { return chunkSize*maxLineJSON + 64<<10 }

// Start runs the worker role: the engine consumes uploads, chunks and
// reports until Stop or ctx ends.
func (a *App) Start(ctx context.Context) error { return a.eng.Start(ctx) }

// Stop stops the worker role, letting the batch in flight finish.
func (a *App) Stop(ctx context.Context) error { return a.eng.Stop(ctx) }

// Engine returns the app's engine.
func (a *App) Engine() *idem.Engine { return a.eng }

// Store returns the app's store.
func (a *App) Store() store.Store { return a.st }

// OpenStore opens the store (and queue) at dsn: a postgres:// or
// postgresql:// URL (schema "ingestor", migrated at open), or else a
// SQLite file path (its directory is created).
func OpenStore(ctx context.Context, dsn string, log *slog.Logger) (store.Queue, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		return pgstore.Open(ctx, dsn, &pgstore.Config{Schema: "ingestor", Migrate: true, Logger: log})
	}
	if err := os.MkdirAll(filepath.Dir(dsn), 0o755); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	return sqlitestore.Open(ctx, dsn, &sqlitestore.Config{Logger: log})
}

// IdempotencyKey is the hex SHA-256 over the file bytes and the supplier
// code: a client retrying an upload gets the same key, a different
// supplier sending the same bytes a different one. It is also the job ID.
func IdempotencyKey(content []byte, supplier string) string {
	h := sha256.New()
	h.Write(content)
	h.Write([]byte{0})
	h.Write([]byte(supplier))
	return hex.EncodeToString(h.Sum(nil))
}

// Submission is the result of Submit.
type Submission struct {
	// Created is true when this call created the job; false when it
	// existed (a repeat upload) or is not confirmed yet (Pending).
	Created bool
	// Pending is true when no worker created the job within
	// Config.ConfirmWait; it will be created when one runs.
	Pending bool
	JobID   string
	// Job is the job as stored, nil when Pending.
	Job *JobView
}

// ErrTooLarge is wrapped by Submit for a file over Config.MaxFileBytes.
var ErrTooLarge = errors.New("file too large")

// ErrBadSupplier is wrapped by Submit for an invalid supplier code.
var ErrBadSupplier = errors.New("invalid supplier code")

// Submit validates a file and starts its import, idempotently: the same
// bytes from the same supplier always name the same job. Invalid files
// return a *ValidationError; nothing is stored for them.
func (a *App) Submit(ctx context.Context, supplier, format, fileName string, content []byte) (*Submission, error) {
	if !ValidSupplier(supplier) {
		return nil, fmt.Errorf("%w %q: want 1-32 of A-Z, 0-9 and -", ErrBadSupplier, supplier)
	}
	if len(content) > a.cfg.MaxFileBytes {
		return nil, fmt.Errorf("%w: %d bytes, the limit is %d", ErrTooLarge, len(content), a.cfg.MaxFileBytes)
	}
	if _, err := Parse(format, content); err != nil {
		return nil, err
	}
	id := IdempotencyKey(content, supplier)
	v, err := a.Job(ctx, id)
	if err != nil {
		return nil, err
	}
	if v != nil {
		return &Submission{JobID: id, Job: v}, nil
	}
	var nonce [12]byte
	_, _ = rand.Read(nonce[:])
	req := ImportRequested{Job: id, Supplier: supplier, Format: format, FileName: fileName, Content: content,
		ChunkSize: a.cfg.ChunkSize, RequestID: hex.EncodeToString(nonce[:])}
	env, err := a.eng.NewEnvelope("import-"+id, req)
	if err != nil {
		return nil, err
	}
	env.IdempotencyKey = id
	// Publish and wait for a worker to create the job, to tell the client
	// whether this request created it. The worker may be another process:
	// Apply learns the outcome from the store.
	wctx, cancel := context.WithTimeout(ctx, a.cfg.ConfirmWait)
	defer cancel()
	r, err := a.eng.PublishAndWait(wctx, env)
	switch {
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		return &Submission{JobID: id, Pending: true}, nil // published; applied later
	case err != nil:
		return nil, fmt.Errorf("submit job %s: %w", id, err)
	}
	snap, err := idem.LoadInstance(ctx, a.st, a.job, id)
	if err != nil || snap == nil {
		return nil, errors.Join(fmt.Errorf("submit job %s: applied but not readable", id), err)
	}
	v, err = a.view(ctx, snap, false)
	// Two identical uploads racing both see a new message: the job's
	// request ID tells which one created it.
	return &Submission{JobID: id, Job: v, Created: !r.Duplicate && snap.Data.RequestID == req.RequestID}, err
}

// ErrNotRequeueable is wrapped by Requeue for a job that is not
// PartiallySucceeded or Failed.
var ErrNotRequeueable = errors.New("job cannot be requeued")

// ErrNotFound is wrapped for an unknown job.
var ErrNotFound = errors.New("job not found")

// Requeue re-runs the failed chunks of a PartiallySucceeded or Failed job.
// Repeating a requeue before it was applied publishes the same message
// again, which the job skips as a duplicate.
func (a *App) Requeue(ctx context.Context, id string) error {
	snap, err := idem.LoadInstance(ctx, a.st, a.job, id)
	if err != nil {
		return err
	}
	if snap == nil {
		return fmt.Errorf("requeue %s: %w", id, ErrNotFound)
	}
	if s := saga.State(snap.Instance.State); s != PartiallySucceeded && s != Failed {
		return fmt.Errorf("requeue %s: %w: it is %s; only PartiallySucceeded and Failed jobs re-run their failed chunks", id, ErrNotRequeueable, s)
	}
	gen := snap.Data.Generation + 1
	env, err := a.eng.NewEnvelope(fmt.Sprintf("requeue-%s-%d", id, gen), RequeueRequested{Job: id, Generation: gen})
	if err != nil {
		return err
	}
	if err := a.eng.Publish(ctx, env); err != nil {
		return fmt.Errorf("requeue %s: %w", id, err)
	}
	return nil
}

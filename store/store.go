// Package store defines the unit-of-work contract through which Idem's
// engine loads and persists saga instances, inbox records, outbox messages,
// timers, journal entries and dead letters.
//
// The contract is sized for batches: a unit of work loads every instance a
// batch touches in one call and persists every change of the batch in one
// commit. Every implementation must pass the conformance suite in package
// storetest, which checks each line of the contract below:
//
//   - a load returns a fresh copy every time: mutating a returned value never
//     affects the store or another load;
//   - a missing instance is reported as absent (nil), never as an error;
//   - inserting an instance whose (saga type, key) exists, or updating one
//     whose version changed since it was loaded, fails the commit with an
//     error that wraps ErrConflict;
//   - every write of one unit of work commits or none does;
//   - concurrent units of work on the same key never lose an update;
//   - writes are acknowledged by durable storage before Commit returns;
//   - Begin and Load never wait for other open units of work: several may
//     be open at once, in one goroutine or many, and a lost race surfaces
//     at Commit as ErrConflict (a SQL store translates serialization and
//     busy-snapshot failures to it).
//
// The queries that operations tools run (the console, the admin API, the
// CLI) are a contract of their own, in package store/readmodel: the engine
// needs none of them.
//
// This package imports only the standard library and package transport.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/idemhq/idem/transport"
)

// ErrConflict is wrapped by Commit when an insert found an existing instance
// or an update found a different version: another unit of work won. The
// engine reloads and re-applies. Check with errors.Is.
var ErrConflict = errors.New("concurrent modification")

// ErrReadOnly is wrapped by a store's operations (Begin, Commit, the
// queue's) when the database refuses writes because the server it reached
// is no longer, or not, the primary: after a failover, a demoted or fenced
// primary answers with PostgreSQL's SQLSTATE 25006. Nothing was committed.
// The store drops its sessions on that server, so a retry, which connects
// again, may succeed once a primary accepts writes. The engine reports it
// in Ready until a unit of work commits, and returns the messages of a
// unit of work refused with it to the transport with backoff, never
// dead-lettering them for it. Check with errors.Is.
var ErrReadOnly = errors.New("the database refuses writes (not the primary)")

// ErrNotFound is returned by operations that address one record by id (a dead
// letter, a timer) when it does not exist. Loading saga instances never
// returns it.
var ErrNotFound = errors.New("not found")

// ErrNotMigrated is wrapped by a store's constructor (pgstore.Open and
// New, sqlitestore.Open) when the database holds no schema of Idem's or
// one older than the store's package, and the store was told not to
// migrate it: run `idem migrate` (or let the store migrate). Check with
// errors.Is.
var ErrNotMigrated = errors.New("schema not migrated")

// ErrSchemaTooNew is wrapped by a store's constructor when the database's
// schema was migrated by a newer version of Idem than the store's package
// knows, and the store refuses to run on it (sqlitestore does; pgstore
// checks only that no migration is missing): upgrade Idem. Check with
// errors.Is.
var ErrSchemaTooNew = errors.New("schema newer than this version of Idem")

// ErrRejected is wrapped by Load and Commit when the database refused the
// data itself rather than failing to store it: a value the store cannot
// represent (PostgreSQL refuses U+0000 in text and jsonb), a string too
// long for its column, an index row too large. Trying the same data again
// fails the same way, so the engine isolates the message that carries it
// and dead-letters it instead of retrying. The error's text names the
// field. Check with errors.Is.
var ErrRejected = errors.New("data rejected by the store")

// RejectedError is how a store says which part of a unit of work it
// refused. It wraps ErrRejected and the database's own error.
type RejectedError struct {
	// Field names what was refused: "state" for a saga instance's state
	// document; "data" when the store cannot tell which record of the
	// unit of work it refused (pgstore maps SQLSTATE classes 22 and 54
	// there).
	Field string
	// Err is the database's error.
	Err error
}

func (e *RejectedError) Error() string { return e.Field + " refused by the store: " + e.Err.Error() }

// Unwrap returns ErrRejected and the database's error.
func (e *RejectedError) Unwrap() []error { return []error{ErrRejected, e.Err} }

// PoolSizer is implemented by stores that serve a bounded number of
// connections at once. The engine refuses to start when its own loops
// need more than PoolSize connections, instead of waiting forever for one.
type PoolSizer interface {
	PoolSize() int
}

// SingleWriter is implemented by stores that serialise every write through
// one connection (sqlitestore). The engine's Config.Consumers defaults to
// 1 on them: more consumers only queue at the writer, and keep it so busy
// that another process waiting for the database's lock (a replica
// restarting, say) can wait past its busy timeout.
type SingleWriter interface {
	SingleWriter()
}

// Status values of an instance.
const (
	StatusActive   = "active"
	StatusFinished = "finished"
)

// Key addresses one saga instance.
type Key struct {
	SagaType string `json:"saga_type"`
	Key      string `json:"key"`
}

// Instance is the persisted form of one saga instance.
type Instance struct {
	SagaType string `json:"saga_type"`
	Key      string `json:"key"`
	// State is the name of the state machine's current state.
	State string `json:"state"`
	// Data is the JSON encoding of the saga's typed state.
	Data []byte `json:"data"`
	// SchemaVersion is the version of Data's schema, for upgrades on load.
	SchemaVersion int `json:"schema_version"`
	// Version is the optimistic-concurrency version: 1 after insert, +1 on
	// each update. On an update it holds the version that was loaded.
	Version int64 `json:"version"`
	// Timers maps each scheduled timer's name to the ID of the envelope it
	// will fire; a fired envelope whose ID is not here is stale.
	Timers map[string]string `json:"timers,omitempty"`
	// CreatedAt and UpdatedAt are set by the engine.
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// FinishedAt is set when the instance entered a final state; zero
	// otherwise. Finished instances are kept until the sweeper removes them.
	FinishedAt time.Time `json:"finished_at,omitzero"`
	// Attributes are the saga's searchable attributes (saga.Machine's
	// Attribute), name to value, computed by the engine from the new state
	// at each commit: values are non-empty, valid UTF-8 in NFC form without
	// control characters, at most 256 bytes. A store keeps them with the instance in
	// the same commit, replacing the previous set, and returns them on
	// every load; nil when there are none.
	Attributes map[string]string `json:"attributes,omitempty"`
}

// Status reports StatusFinished when FinishedAt is set, StatusActive
// otherwise.
func (in *Instance) Status() string {
	if in.FinishedAt.IsZero() {
		return StatusActive
	}
	return StatusFinished
}

// Clone returns a deep copy of in.
func (in *Instance) Clone() *Instance {
	if in == nil {
		return nil
	}
	c := *in
	c.Data = append([]byte(nil), in.Data...)
	if in.Timers != nil {
		c.Timers = make(map[string]string, len(in.Timers))
		for k, v := range in.Timers {
			c.Timers[k] = v
		}
	}
	if in.Attributes != nil {
		c.Attributes = make(map[string]string, len(in.Attributes))
		for k, v := range in.Attributes {
			c.Attributes[k] = v
		}
	}
	return &c
}

// InboxKey addresses one inbox record: message MessageID was applied (or
// deliberately skipped) by the saga instance SagaType/Key.
type InboxKey struct {
	SagaType  string `json:"saga_type"`
	Key       string `json:"key"`
	MessageID string `json:"message_id"`
}

// InboxEntry is one inbox record.
type InboxEntry struct {
	InboxKey
	ProcessedAt time.Time `json:"processed_at"`
}

// OutboxMessage is a message emitted by a transition, stored in the same
// commit as the transition and handed to the transport afterwards.
type OutboxMessage struct {
	Envelope  transport.Envelope `json:"envelope"`
	CreatedAt time.Time          `json:"created_at"`
	// SentAt is zero until the transport accepted the message.
	SentAt time.Time `json:"sent_at,omitzero"`
}

// Timer is a scheduled message that fires at DueAt. (SagaType, Key, Name)
// identifies a timer: scheduling a name again replaces it.
type Timer struct {
	SagaType string             `json:"saga_type"`
	Key      string             `json:"key"`
	Name     string             `json:"name"`
	DueAt    time.Time          `json:"due_at"`
	Envelope transport.Envelope `json:"envelope"`
}

// TimerKey addresses one timer.
type TimerKey struct {
	SagaType string `json:"saga_type"`
	Key      string `json:"key"`
	Name     string `json:"name"`
}

// JournalEntry records one applied transition. The journal is append-only.
type JournalEntry struct {
	SagaType  string `json:"saga_type"`
	Key       string `json:"key"`
	RawKey    string `json:"raw_key,omitempty"`
	MessageID string `json:"message_id"`
	EventType string `json:"event_type"`
	FromState string `json:"from_state"`
	ToState   string `json:"to_state"`
	// Version is the instance version the commit that applied the entry
	// produced. One commit may apply several messages to one saga: their
	// entries share the version and keep their order of insertion, which is
	// the order Journal returns.
	Version int64     `json:"version"`
	At      time.Time `json:"at"`
	JournalDetail
}

// DeadLetter is a message the engine gave up on, with why. ID is the
// message's deduplication identity; recording a dead letter for an ID that
// already has one replaces it, keeping the earlier FirstFailedAt, the
// first failure's FirstReason and FirstError, and the replay history. A
// store that keeps the history (DeadLetterReplayer) then settles the
// latest replay, if it is ReplayPending, as ReplayFailed with the new
// failure's LastFailedAt, Reason and Error. It is not a wire format: the
// admin API and idem dlq --json show a dead letter as admin.DeadLetter.
type DeadLetter struct {
	ID       string
	Envelope transport.Envelope
	// Reason is a short machine-readable cause, for example "malformed_body".
	Reason string
	// Error is the full error chain as text.
	Error    string
	SagaType string
	Key      string
	Attempts int
	// FirstFailedAt and LastFailedAt bound the failed attempts.
	FirstFailedAt time.Time
	LastFailedAt  time.Time
	// FirstReason and FirstError are the first failure's, which Reason and
	// Error replace when the dead letter is recorded again. The store sets
	// them; they are ignored in Changes.DeadLetters.
	FirstReason string
	FirstError  string
	// Replays is the replay history, oldest first (see
	// DeadLetterReplayer); the store sets it, and it is ignored in
	// Changes.DeadLetters.
	Replays []Replay
	// Fingerprint is Fingerprint(Reason, Error), "" for a dead letter
	// recorded before the stores kept it; ArchivedAt is when it was
	// archived (readmodel.DeadLetterArchiver), zero when it is not. The store sets
	// both; they are ignored in Changes.DeadLetters.
	Fingerprint string
	ArchivedAt  time.Time
}

// LoadParams lists what a unit of work needs before applying a batch.
type LoadParams struct {
	// Keys are the instances to load.
	Keys []Key
	// Inbox are the inbox records to check.
	Inbox []InboxKey
	// Tokens are the dedup tokens to look up (see TokenStore); a store
	// that does not implement TokenStore ignores them.
	Tokens []string
}

// LoadResult is what Load found. Instances holds a fresh copy of each
// existing instance, keyed by its Key; absent keys are simply missing. Seen
// holds the inbox keys that have a record; Tokens the requested tokens that
// exist, unclaimed (nil when none were requested).
//
// Instances and Seen need not be read at one moment: a store may read the
// inbox records after the instances (pgstore does, in two statements at
// READ COMMITTED), so a commit that lands in between shows a message as
// seen beside its saga as it was before that message. A store must not
// read them in the other order, and a later Load of a unit of work must
// not see less than an earlier one. The engine relies on both: a stale
// instance fails its commit's version check, and Engine.PublishAndWait reads the
// saga with a second Load once the first saw the message's record.
type LoadResult struct {
	Instances map[Key]*Instance
	Seen      map[InboxKey]bool
	Tokens    map[string]bool
}

// Changes are the writes of one unit of work, committed together.
type Changes struct {
	// Inserts are new instances; an existing (SagaType, Key) is a conflict.
	// Version must be 1.
	Inserts []*Instance
	// Updates replace instances whose stored version equals Version; the
	// stored version becomes Version+1. Any other stored version, or a
	// missing instance, is a conflict.
	Updates []*Instance
	// Inbox records to add; an existing record is left as it is.
	Inbox []InboxEntry
	// Outbox messages to add; an envelope ID already in the outbox is left
	// as it is (never a conflict).
	Outbox []OutboxMessage
	// Timers to add or replace; replacing a timer also ends its claim lease.
	Timers []Timer
	// CancelTimers to delete; a missing timer is not an error. The engine
	// never names one timer in both Timers and CancelTimers; a store may
	// apply cancellations first.
	CancelTimers []TimerKey
	// Journal entries to append.
	Journal []JournalEntry
	// DeadLetters to record.
	DeadLetters []DeadLetter
	// MintTokens and ClaimTokens are the token inbox's writes (see
	// TokenStore); the engine sets them only for a TokenStore.
	MintTokens  []Token
	ClaimTokens []string
	// SettleReplays, when set, settles replays in the same commit, as
	// DeadLetterReplayer.SettleReplays would: the engine sets it, only on
	// a DeadLetterReplayer, when the unit of work consumes replayed
	// messages without dead-lettering them, so that a crash after the
	// commit cannot leave their replays pending.
	SettleReplays *SettleReplaysParams
	// SettleDuplicates, when set, settles replays in the same commit as
	// SettleReplays does, with its own outcome: the engine sets it, with
	// ReplayDuplicate, for replayed messages the unit of work found
	// already applied (an earlier copy was), so that one commit settles
	// both kinds.
	SettleDuplicates *SettleReplaysParams
	// ClearRetries are the IDs of retries (see RetryRecorder) to delete in
	// the same commit: the engine sets them, only on a RetryRecorder, for
	// messages applied or dead-lettered after a failed delivery. A missing
	// ID is not an error; a store without RetryRecorder ignores them.
	ClearRetries []string
	// RecordRetries are retries to record in the same commit, each as
	// RetryRecorder.RecordRetry records it (the same upsert, which never
	// lowers Attempts): the engine sets them, only on a RetryRecorder,
	// for messages given back after a failure, so that a retry row and
	// the message's return commit or roll back together. A retry Validate
	// refuses fails the commit with its error (wrapping ErrRejected); a
	// store without RetryRecorder ignores them.
	RecordRetries []Retry
	// ReleaseHolds are the holders (see Limiter) whose holds the commit
	// releases, in the same transaction as the rest: the engine sets them,
	// only on a Limiter, for the messages whose outcome the unit of work
	// commits. An unknown holder is ignored; a store without Limiter
	// ignores them.
	ReleaseHolds []string
}

// Empty reports whether c holds no writes.
func (c *Changes) Empty() bool {
	return len(c.Inserts)+len(c.Updates)+len(c.Inbox)+len(c.Outbox)+len(c.Timers)+
		len(c.CancelTimers)+len(c.Journal)+len(c.DeadLetters)+len(c.MintTokens)+len(c.ClaimTokens)+len(c.ClearRetries)+len(c.RecordRetries)+len(c.ReleaseHolds) == 0 &&
		(c.SettleReplays == nil || len(c.SettleReplays.IDs) == 0) &&
		(c.SettleDuplicates == nil || len(c.SettleDuplicates.IDs) == 0)
}

// UnitOfWork is one transaction. It is used by one goroutine at a time. After
// Commit or Rollback the unit of work is finished; Rollback after Commit is a
// no-op, so callers may defer it.
type UnitOfWork interface {
	// Load reads instances and inbox records in one round trip.
	Load(ctx context.Context, p *LoadParams) (*LoadResult, error)
	// Commit writes every change or none. A conflict wraps ErrConflict.
	// When Commit returns another error, the outcome may be unknown: the
	// caller must not assume the changes were discarded.
	Commit(ctx context.Context, c *Changes) error
	// Rollback discards the unit of work.
	Rollback(ctx context.Context) error
}

// ClaimParams select unsent outbox messages or due timers to claim.
type ClaimParams struct {
	// Now is the current time as the engine's clock sees it.
	Now time.Time
	// Limit bounds how many rows are claimed.
	Limit int
	// Lease is how long the claim keeps other claimers away. A store that
	// several processes share measures it on one clock they all see (the
	// database's), not on Now: a replica whose clock runs ahead must not
	// take back a claim another still holds. A store private to one
	// process (memstore) may measure it on Now.
	Lease time.Duration
	// CreatedBefore selects outbox messages created before it (so that the
	// relay leaves fresh messages to the committing engine's fast path).
	CreatedBefore time.Time
}

// ListParams page through records for operations tools.
type ListParams struct {
	SagaType string
	State    string
	// After is an opaque cursor: the last key (instances) or ID (dead
	// letters) of the previous page.
	After string
	Limit int
}

// SweepParams bound one sweep. A zero time selects nothing.
type SweepParams struct {
	// FinishedBefore: finished instances with FinishedAt before it are
	// deleted with their inbox records, timers and journal.
	FinishedBefore time.Time
	// InboxBefore: inbox records processed before it whose (SagaType, Key)
	// has no instance (records of plain handlers, and orphans) are deleted.
	InboxBefore time.Time
	// SentBefore: sent outbox messages with SentAt before it are deleted.
	SentBefore time.Time
	// Limit bounds how many instances, how many inbox records and how many
	// outbox rows one call deletes.
	Limit int
}

// SweepResult counts what a sweep deleted.
type SweepResult struct {
	Instances int
	Inbox     int
	Outbox    int
}

// Store is the persistence contract. Implementations must be safe for
// concurrent use and must pass storetest.
type Store interface {
	// Begin starts a unit of work.
	Begin(ctx context.Context) (UnitOfWork, error)

	// ClaimOutbox claims unsent outbox messages created before
	// p.CreatedBefore for p.Lease; a claimed message is not returned to
	// another claimer until the lease expires or it is marked sent.
	ClaimOutbox(ctx context.Context, p *ClaimParams) ([]OutboxMessage, error)
	// MarkSent records that the transport accepted the messages with these
	// envelope IDs.
	MarkSent(ctx context.Context, ids []string, at time.Time) error

	// ClaimTimers claims timers due at or before p.Now for p.Lease.
	ClaimTimers(ctx context.Context, p *ClaimParams) ([]Timer, error)
	// DeleteTimers removes fired timers, but only those whose envelope ID
	// still matches (a timer rescheduled meanwhile is kept).
	DeleteTimers(ctx context.Context, ts []Timer) error

	// Sweep deletes finished instances (with their inbox records, timers
	// and journal), orphan inbox records and sent outbox rows past
	// retention, each bounded by p.Limit. Dead letters are kept until an
	// operator deletes them.
	Sweep(ctx context.Context, p *SweepParams) (*SweepResult, error)

	// ListInstances pages through instances ordered by (SagaType, Key).
	ListInstances(ctx context.Context, p *ListParams) ([]*Instance, error)
	// Journal returns the journal of one instance in order.
	Journal(ctx context.Context, k Key) ([]JournalEntry, error)
	// ListTimers pages through timers ordered by DueAt.
	ListTimers(ctx context.Context, p *ListParams) ([]Timer, error)
	// TimersOf returns every timer of the saga k, ordered by (DueAt,
	// Name), through an index on (SagaType, Key): its cost does not grow
	// with the number of other timers. An empty k.SagaType selects the
	// timers of key k.Key in every saga type, ordered by (DueAt, SagaType,
	// Name). Names and types compare byte for byte. A key no timer can
	// have (empty, U+0000, invalid UTF-8) selects none, without an error.
	TimersOf(ctx context.Context, k Key) ([]Timer, error)
	// OutboxBacklog counts unsent outbox messages and the creation time of
	// the oldest (zero when none).
	OutboxBacklog(ctx context.Context) (int, time.Time, error)

	// ListDeadLetters pages through dead letters ordered by ID.
	ListDeadLetters(ctx context.Context, p *ListParams) ([]DeadLetter, error)
	// GetDeadLetter returns one dead letter or an error wrapping ErrNotFound.
	GetDeadLetter(ctx context.Context, id string) (*DeadLetter, error)
	// DeleteDeadLetters removes dead letters by ID; missing IDs are ignored.
	DeleteDeadLetters(ctx context.Context, ids []string) (int, error)

	// Close releases resources.
	Close() error
}

// QueueUnitOfWork is implemented by the units of work of a store that also
// serves as the engine's transport (a queue table in the same database).
// The engine then settles deliveries and enqueues emitted messages inside
// the unit of work, so consumption, state change and emission commit
// together and no outbox relay is needed.
type QueueUnitOfWork interface {
	UnitOfWork
	// Consume marks deliveries as settled in this unit of work. A delivery
	// whose lease was lost fails the commit with transport.ErrLeaseLost.
	Consume(ctx context.Context, ds []transport.Delivery) error
	// Enqueue adds messages to the queue in this unit of work.
	Enqueue(ctx context.Context, msgs []transport.Envelope) error
}

// ClaimUnitOfWork is implemented by the units of work of a store.Queue
// that can take messages from the queue inside the unit of work, instead
// of leasing them with Receive beforehand. The engine then claims a batch,
// loads and applies it and commits, all in one transaction: the claim
// writes nothing to the queue that a rollback must undo, and a crash
// before the commit returns the messages as they were.
type ClaimUnitOfWork interface {
	QueueUnitOfWork
	// Claim takes up to max visible messages, oldest first (ordered as
	// Receive orders them), restricted to partition part of parts as
	// transport.PartitionedConsumer.ReceivePartition is (parts < 2 means
	// every message), and returns them ordered by enqueue order. It may
	// be called once per unit of work, before anything else, and does
	// not wait: it returns no delivery when none is visible.
	//
	// The claimed messages are hidden from every other claim and Receive
	// until the unit of work ends. A store may end a unit of work that
	// sits idle between two calls for longer than its queue's lease, so
	// that a claimer gone silent does not hold them longer than a lease
	// would: Commit then fails. They leave the queue only when Commit
	// succeeds, and Commit refuses (committing nothing) a unit of work
	// that did not Consume or Return every delivery it claimed. Rollback,
	// a failed Commit followed by Rollback, or a crash before the commit
	// returns them untouched: same position, same visibility, and their
	// Attempt not counted (each claimed delivery's Attempt is one more
	// than the stored count, as Receive's would be).
	Claim(ctx context.Context, max, part, parts int) ([]transport.Delivery, error)
	// Return puts a claimed delivery back in the queue when the unit of
	// work commits, as transport.Transport.Nack does after a Receive:
	// visible after delay, its Attempt counted, its position among
	// messages visible at the same time unchanged.
	Return(ctx context.Context, d transport.Delivery, delay time.Duration) error
	// Lease ends the unit of work, discarding everything it did after its
	// claim except the claim itself, which it turns into a lease: the
	// claimed messages go back to the queue as Receive would have handed
	// them out (Attempt counted, invisible for the queue's lease), and
	// Lease returns them, in claim order, as deliveries of the queue to
	// settle with Ack, Nack or a unit of work's Consume. It may be called
	// after any call that failed, Commit included, as long as the unit of
	// work is still open: Commit keeps it open when the store refused the
	// unit of work's writes (store.ErrConflict, store.ErrRejected) and the
	// claim survived. When Lease fails, the unit of work is rolled back
	// and the claimed messages are back untouched, as after a crash.
	Lease(ctx context.Context) ([]transport.Delivery, error)
}

// Queue is a Store that is also a transport.Transport whose units of work
// implement QueueUnitOfWork.
type Queue interface {
	Store
	transport.Transport
}

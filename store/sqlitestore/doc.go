// Package sqlitestore is Idem's embedded default store: a store.Store and a
// transactional queue (store.Queue, a transport.Transport) in one SQLite
// database file, on modernc.org/sqlite (pure Go, no cgo, no server).
//
// Because the queue lives in the same file, the engine settles deliveries,
// changes saga state and enqueues emitted messages in one transaction, and
// no outbox relay is needed. Pass the same *Store as store and transport:
//
//	st, err := sqlitestore.Open(ctx, "idem.db", nil)
//	...
//	engine, err := idem.NewEngine(st, st, nil)
//
// # Durability and refusals
//
// Open puts the database in WAL mode with synchronous=FULL: every commit is
// synced to the write-ahead log before Commit, Publish, Ack, Nack, MarkSent,
// DeleteTimers, Sweep or DeleteDeadLetters returns. The one exception is a
// transaction that only takes leases (the claims of Receive, ClaimOutbox and
// ClaimTimers): it commits without an fsync of its own, and the next
// durable commit syncs it, in log order. A power failure may thus forget a
// claim, which is harmless: its holder is gone too, and the rows are
// claimable again as if the lease had expired.
//
// Open refuses, with an error that says what to do, an empty path, an
// in-memory database or URI, a path whose directory is missing or not
// writable (SQLite creates the -wal and -shm files beside the database), a
// file that is not a SQLite database, a file system on which WAL mode is
// unavailable, and a schema newer than this package (store.ErrSchemaTooNew).
//
// # Migrations
//
// Numbered migrations are embedded (migrations/*.sql) and recorded in the
// table idem_migrations. Open applies the missing ones by default, in one
// BEGIN IMMEDIATE transaction so that processes opening one file at once
// take turns: the user of an embedded database expects a new path to just
// work. Config.SkipMigrate makes Open refuse a missing or old schema with
// store.ErrNotMigrated instead, for deployments that run `idem migrate` as a step
// of their own.
//
// # Concurrency
//
// SQLite lets one connection write at a time, and a unit of work must
// never wait in Begin or Load for another one. A Store therefore keeps:
//
//   - a pool of read-only connections (PRAGMA query_only) for Load and the
//     listing operations. In WAL mode they read the last committed state
//     without waiting for the writer. Load reads instances and inbox
//     records in one read transaction, so both come from one snapshot.
//   - one writing connection, owned by one goroutine. Every write (Commit,
//     Publish, the claims of Receive, ClaimOutbox and ClaimTimers, Ack,
//     Nack, MarkSent, DeleteTimers, Sweep, DeleteDeadLetters) is a request
//     to it. Requests that arrive while a transaction is being written
//     form the next group: one BEGIN IMMEDIATE, one SAVEPOINT per request
//     when there are several (a request that fails rolls back alone), one
//     COMMIT, so one fsync is shared by all the units of work of an
//     engine's lanes. Each caller learns its outcome only after the COMMIT.
//
// A unit of work holds no connection and no lock between calls. Its Commit
// checks, inside the write transaction, that every updated instance still
// has the version it loaded (UPDATE ... WHERE version = ?, one row or
// store.ErrConflict) and inserts new instances under the primary key
// (saga_type, key), a violation being store.ErrConflict; a consumed
// delivery whose lease was taken over fails the commit with
// transport.ErrLeaseLost.
//
// Several processes on one machine may open one file: SQLite's file locks
// serialize their writers, and the versions arbitrate between their units
// of work. Those locks are not fair, though: a process that writes without
// pause can hold back another's writes, which wait up to Config.BusyTimeout
// and then fail (the engine returns the messages and retries). Sharing a
// file between processes suits a few workers, a CLI beside a server and
// restarts; for replicas under sustained load, use PostgreSQL.
//
// Statements of the write transaction do not watch the callers' contexts
// (cancelling one would abort the whole group): a caller whose context ends
// before its request started gets the context's error and its request never
// runs; once started, the caller waits for the outcome, which takes one
// transaction.
//
// # Queue
//
// Receive first looks, on a reader, for the earliest visible message and
// takes the write lock only when one is visible now (ClaimOutbox and
// ClaimTimers look likewise, so idle pollers never write). It claims the
// messages that became visible first and hands them out in publication
// order. SQLite has no
// LISTEN/NOTIFY: a Publish, a Commit that enqueues and a Nack through this
// Store wake its waiting consumers at once; otherwise a consumer looks
// again when the next lease or Nack delay ends, and at least every
// Config.PollInterval, which is how messages written by other processes are
// found. Deliveries carry a token (queue sequence number and a random
// claim id): Ack and Nack of a delivery whose message was claimed again
// fail with transport.ErrLeaseLost and leave the newer claim alone. Queue
// times come from this machine's clock. Pending (transport.PendingCounter)
// counts the messages visible now and those leased or delayed.
//
// A lease must outlast the batch that holds it, or the batch is handed to
// another consumer and its commit refused as lost. The engine keeps the
// leases of a batch alive while it runs: ExtendLeases
// (transport.LeaseExtender) moves the deliveries still unsettled, fenced
// by their tokens, to Config.Lease from now, every third of the Lease, in
// a lease-only write. A Nack retires the delivery's token, so a later
// extension leaves the Nack's delay alone. So a handler slower than the Lease is safe, and
// Config.Lease bounds only how long the messages of a dead consumer wait.
// Without the extension (a wrapper that hides it), the engine runs a
// message that outlived its lease apart from its batch mates and
// dead-letters it after idem.Config.MaxAttempts hand-outs.
//
// # Journal
//
// The journal is append-only: triggers refuse UPDATE, and refuse DELETE
// unless the one-row table idem_journal_guard says the sweeper is at work.
// Sweep sets that flag and clears it again inside its own transaction, so
// no other connection ever sees it set.
//
// # Flow control
//
// A Store is a store.Limiter and a store.AdmittingQueue. Every admission
// is one request to the writer, so admissions are serialised by the
// database's write lock, across processes too; holds expire by the
// process's clock, as leases do. ReceiveAdmitted decides and leases in one
// write transaction; an admitted delivery's holds expire with its lease,
// are extended by ExtendLeases and released by Ack, Nack and Consume.
// Once its lease has passed, an admitted delivery is lost: those four
// refuse it with transport.ErrLeaseLost, so two holders of a slot never
// overlap. Deliveries of Receive hold nothing and settle as before. The queue has
// no partitions: ReceiveParams.Parts above 1 is refused.
//
// # Storage and choices where package store leaves room
//
// Times are INTEGER microseconds since the Unix epoch (UTC) and come back
// in UTC; saga data and envelope fields are JSON TEXT, message bodies BLOB.
// Text compares bytewise (SQLite's BINARY collation), like Go strings. The
// conventions of package memstore apply:
//
//   - A nil params pointer means the zero params. ListParams.Limit,
//     ClaimParams.Limit and SweepParams.Limit below 1 mean 100.
//   - ListInstances filters on SagaType and State when they are non-empty.
//     Its cursor ListParams.After is the Key of the last instance of the
//     previous page when SagaType is set, and SagaType + "\x00" + Key
//     otherwise; the second form is accepted in both cases.
//   - ListTimers orders by (DueAt, SagaType, Key, Name) and filters on
//     SagaType. Its cursor is the last timer's DueAt in time.RFC3339Nano,
//     SagaType, Key and Name joined with "\x00".
//   - ListDeadLetters filters on SagaType. Its cursor is the last ID.
//   - ClaimOutbox returns messages by (CreatedAt, commit order), ClaimTimers
//     by DueAt. Due times and CreatedBefore are judged against
//     ClaimParams.Now; leases are measured on the host's clock, which is
//     the database's (every process sharing the file runs on this host),
//     so that engines given different clocks agree on them.
//   - Scheduling a timer name again replaces the timer and its lease.
//   - Within one Commit, CancelTimers are applied before Timers.
//   - An outbox message whose envelope ID is already stored is ignored.
//     MarkSent ignores unknown and already sent IDs.
//   - Sweep deletes the oldest candidates first, with the journal of swept
//     instances.
//   - Commit rejects an insert whose Version is not 1 with an error that does
//     not wrap store.ErrConflict.
//
// After Close every method except Close and Rollback returns an error, also
// on units of work begun earlier; the Store's own methods wrap
// transport.ErrClosed.
package sqlitestore

// Package pgstore is Idem's PostgreSQL store and transactional queue, on
// pgx v5.
//
// A Store implements store.Store and, because its queue table lives in the
// same database, transport.Transport too (store.Queue): pass the same Store
// as the engine's store and transport, and each unit of work consumes its
// deliveries, changes saga state, records the inbox, enqueues the emitted
// messages and schedules timers in one PostgreSQL transaction.
//
// Units of work are pipelined: BEGIN and the loads of a batch travel in one
// round trip, every write of the batch (multi-row statements over unnest
// arrays) and COMMIT in a second. Guarded writes raise inside the
// transaction when they match fewer rows than expected, so a pipelined
// COMMIT never commits part of a unit of work.
//
// The queue is consumed with FOR UPDATE SKIP LOCKED; a claim sets a lease
// (visible_at in the future) and a fencing token, and acknowledgements and
// consumption check the token. LISTEN/NOTIFY wakes idle consumers: a
// commit that enqueued messages wakes this process's receivers at once and
// sends one coalesced NOTIFY after the commit (inside the transaction it
// would serialise every commit on the server's notification lock). A poll
// every Config.PollInterval (and at the next lease expiry) covers lost
// notifications and expired leases. A unit of work can also claim a batch
// itself (store.ClaimUnitOfWork): DELETE … RETURNING over FOR UPDATE SKIP
// LOCKED, sent with BEGIN, so that the claim commits with the state and a
// rollback or a crash leaves the rows untouched. ReceivePartition
// (transport.PartitionedConsumer) takes one partition of the saga keys:
// each message's partition is PostgreSQL's hashtext of its canonical key
// (NFC, trimmed), so every spelling of a key shares a consumer. Pending
// (transport.PendingCounter) counts the messages visible now and those
// leased or delayed.
//
// A lease must outlast the batch that holds it, or the batch is handed to
// another consumer and its commit refused as lost. The engine keeps the
// leases of a batch alive while it runs: ExtendLeases
// (transport.LeaseExtender) moves visible_at to now() plus Config.Lease
// for the deliveries still unsettled, fenced by their tokens, every third
// of the Lease. It locks the rows in seq order and skips those locked by
// another transaction (a commit consuming them), so it never waits for a
// commit and cannot deadlock with one. A Nack (or a claim's Return)
// retires the delivery's token, so a later extension leaves the Nack's
// delay alone. So a handler slower than the Lease costs nothing more than
// one UPDATE per third of the Lease. Config.Lease then bounds only how
// long the messages of a dead consumer wait. A store wrapper that hides
// ExtendLeases, or a database that refuses the extension, brings the
// limit back; the engine then runs a message that outlived its lease
// apart from its batch mates and dead-letters it after
// idem.Config.MaxAttempts hand-outs.
//
// Every lease is measured on the database's clock (now()): the queue's
// visibility, and the claims of the outbox relay and the timer poller
// (ClaimParams.Now only says what is due), so that replicas whose clocks
// differ never take back each other's claims early.
//
// The journal is append-only: triggers refuse UPDATE, TRUNCATE, and DELETE
// outside Sweep.
//
// Flow control: a Store is a store.Limiter and a store.AdmittingQueue.
// Admit locks the counters it needs in (name, key) order and counts their
// live holds in the next statement, so admissions from any number of
// connections never exceed a cap; ReceiveAdmitted does the same inside
// the transaction that leases the admitted messages, whose holds expire
// with their leases, are extended by ExtendLeases and released by Ack,
// Nack and Consume. Once its lease has passed by the database's clock,
// an admitted delivery is lost: those four refuse it with
// transport.ErrLeaseLost, so two holders of a slot never overlap.
// Deliveries of Receive and Claim hold nothing and settle as before.
//
// Open refuses to start when the server cannot be reached, when the schema
// is missing and Config.Migrate is off, or when the server acknowledges
// commits before they are durable (synchronous_commit=off, fsync=off)
// unless Config.AllowUnsafeCommit is set.
//
// Orders and cursors follow memstore's conventions (see package store):
// text is ordered bytewise (COLLATE "C").
package pgstore

// Package memstore is an in-memory implementation of store.Store, for tests,
// examples, benchmarks and single-process programs that accept losing their
// state on exit.
//
// A Store keeps everything behind one mutex and copies deeply in both
// directions: Commit stores copies of the instances, envelopes and maps it is
// given, and every read (Load, claims, lists, GetDeadLetter) returns fresh
// copies. A unit of work reads the committed state at the time of each Load
// (like READ COMMITTED) and holds no lock between calls; Commit first checks
// every insert and update against the committed versions and only then
// applies all changes, so a conflict leaves nothing behind. Load and Commit
// cost map lookups, not scans; claims, lists and sweeps scan the rows they
// may return.
//
// memstore is not durable: the contract line "writes are acknowledged by
// durable storage" holds only for the life of the process. It passes the
// rest of the conformance suite in package storetest.
//
// A Store is also a store.Limiter: its limits and holds live behind the
// same mutex, and holds expire by the process's clock.
//
// # Choices where package store leaves room
//
//   - A nil params pointer means the zero params. ListParams.Limit,
//     ClaimParams.Limit and SweepParams.Limit below 1 mean 100.
//   - ListInstances filters on SagaType and on State (the state machine's
//     state name, Instance.State) when they are non-empty. Its cursor
//     ListParams.After is the Key of the last instance of the previous page
//     when SagaType is set, and SagaType + "\x00" + Key otherwise; the second
//     form is accepted in both cases.
//   - ListTimers orders by (DueAt, SagaType, Key, Name) and filters on
//     SagaType. Its cursor is the last timer's DueAt in time.RFC3339Nano,
//     SagaType, Key and Name joined with "\x00".
//   - ListDeadLetters filters on SagaType. Its cursor is the last ID.
//   - ClaimOutbox returns messages in commit order, ClaimTimers by DueAt.
//     Leases are measured against ClaimParams.Now only; a lease ends at
//     Now+Lease and a row is free again when a later claim's Now reaches it.
//   - Scheduling a timer name again replaces the timer and its lease: the new
//     timer can be claimed as soon as it is due.
//   - Within one Commit, CancelTimers are applied before Timers.
//   - An outbox message whose envelope ID is already stored is ignored (same
//     ID, same message). MarkSent ignores unknown and already sent IDs.
//   - Sweep deletes the oldest candidates first, with the journal of swept
//     instances (the sweeper is the one path that may delete journal rows).
//   - Commit rejects an insert whose Version is not 1 with an error that does
//     not wrap store.ErrConflict.
//
// After Close every method except Close and Rollback returns an error, also
// on units of work begun earlier.
package memstore

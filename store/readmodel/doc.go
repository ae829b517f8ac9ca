// Package readmodel is the operators' read model of a store: the optional
// queries that the console, the admin API, the CLI and package inspect run
// against a store.Store, apart from the unit-of-work contract of package
// store that the engine runs on. Nothing in the engine calls them.
//
// Each capability is a small interface that a store implements beside
// store.Store and that callers find by type assertion: InstanceQuerier,
// QueryCounter and TimerQuerier page, filter and count instances and
// timers; DeadLetterQuerier, DeadLetterGrouper, DeadLetterArchiver,
// DeadLetterTypeQuerier and UnresolvedCounter triage dead letters;
// RowEstimator and RowCounter size the tables; JournalTailer and
// OutboxSentReader serve a saga's history; ReplicaCounter counts the
// engine replicas by state; Censuser counts what a deploy must serve. A nil result of the assertion
// means "this store cannot", and the caller says so or falls back to the
// store.Store methods.
//
// Implementations must pass storetest.Run, which runs the cases of every
// interface here that the store implements and names those it skips.
// The package imports only the standard library and package store.
package readmodel

package store

import "context"

// DeadLetterTypeQuerier is a DeadLetterQuerier (and, when the store groups
// dead letters, a DeadLetterGrouper) that also selects by
// DeadLetterQuery.MessageType in the database. A store without it ignores
// MessageType, and its callers match the envelope's type themselves.
//
// A MessageType that holds U+0000 selects nothing (PostgreSQL cannot hold
// such a type as text); an envelope with a U+0000 elsewhere is selected by
// its type.
type DeadLetterTypeQuerier interface {
	DeadLetterQuerier
	// SelectsMessageType is a marker: it does nothing.
	SelectsMessageType()
}

// UnresolvedCounter is a store that counts its unresolved
// (DeadLettersUnresolved), not archived dead letters up to a bound, reading
// no other dead letter (pgstore from the index of migration 17; memstore).
// The console's overview counts with it; without it, it estimates.
type UnresolvedCounter interface {
	// CountUnresolved returns how many dead letters are unresolved and not
	// archived, counting at most bound of them (a bound below 1 counts
	// none).
	CountUnresolved(ctx context.Context, bound int) (int, error)
}

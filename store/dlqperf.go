package store

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

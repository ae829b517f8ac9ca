package store

import "context"

// DeadLetterQuerier is implemented by stores that filter and count dead
// letters in the database instead of handing every row to the caller
// (pgstore). It is optional: operations tools type-assert a Store for it
// and fall back to paging ListDeadLetters, which reads at most a bounded
// number of rows.
type DeadLetterQuerier interface {
	// QueryDeadLetters returns one page of the dead letters q selects, in
	// ID order (byte order). An empty page means there are no more.
	QueryDeadLetters(ctx context.Context, q *DeadLetterQuery) ([]DeadLetter, error)
	// CountDeadLetters counts the dead letters q selects by reason (q's
	// After and Limit are ignored).
	CountDeadLetters(ctx context.Context, q *DeadLetterQuery) (map[string]int, error)
}

// DeadLetterQuery selects dead letters for DeadLetterQuerier. Every
// non-empty filter must match; the zero value selects every dead letter,
// first page of the default size. There is no message-type filter: the
// envelope is kept exactly as it arrived, possibly unreadable by the
// database (a U+0000 in its type), so callers match the type themselves.
type DeadLetterQuery struct {
	// SagaType and Key are the saga the dead letter was recorded for.
	SagaType string
	Key      string
	// Reason is the machine-readable reason ("malformed_body", ...).
	Reason string
	// After is the ID of the last dead letter of the previous page.
	After string
	// Limit bounds the page; 0 means the store's default.
	Limit int
}

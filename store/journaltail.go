package store

import "context"

// JournalTailer is implemented by stores that read the latest entries of
// one saga's journal without reading the rest: the console's instance page
// shows the latest few of a journal that may hold tens of thousands. It
// must pass storetest.
type JournalTailer interface {
	// JournalTail returns the latest n entries of k's journal, oldest
	// first (in the order Journal returns them), and how many entries the
	// journal holds in all, both read from one snapshot. Its cost grows
	// with n, not with the journal's length (the total is counted from an
	// index). n <= 0 returns no entry, only the total; an n larger than the
	// journal returns all of it. A key no entry can have (U+0000, invalid
	// UTF-8 on a store that refuses them) selects none, without an error.
	JournalTail(ctx context.Context, k Key, n int) ([]JournalEntry, int, error)
}

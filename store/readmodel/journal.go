package readmodel

import (
	"context"
	"time"

	"github.com/idemhq/idem/store"
)

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
	JournalTail(ctx context.Context, k store.Key, n int) ([]store.JournalEntry, int, error)
}

// OutboxSentReader is a store.Store that can say whether outbox messages were
// sent. It must pass storetest.
type OutboxSentReader interface {
	// OutboxSent looks the IDs up in the outbox. The map holds an entry for
	// each ID still in the outbox: its SentAt, zero while it is unsent. An
	// ID absent from the map is not in the outbox: never written there, or
	// sent and swept after the outbox retention. Safe for concurrent use.
	OutboxSent(ctx context.Context, ids []string) (map[string]time.Time, error)
}

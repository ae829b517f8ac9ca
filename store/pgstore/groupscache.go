package pgstore

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/idemhq/idem/store/readmodel"
)

// GroupsCacheTTL is how long GroupDeadLetters keeps an answer: grouping
// every unresolved dead letter reads each of them (about 100 ms for
// 100,000 from the index alone, on two busy cores), and the console asks
// for the same groups on every view and refresh. A dead-letter write
// through the store (recorded, replayed, settled, archived, restored,
// deleted) drops the kept answers at once; one by another process shows
// within this time.
const GroupsCacheTTL = 3 * time.Second

// groupsCache keeps GroupDeadLetters' answers to queries without a mark
// (one with a mark is always read: a mark binds exactly what it counted).
type groupsCache struct {
	mu  sync.Mutex
	m   map[string]groupsEntry
	gen uint64 // counts drops
}

type groupsEntry struct {
	at time.Time
	gs []readmodel.DeadLetterGroup
}

// groupsKey is q's key in the cache, "" when q must not be cached.
func groupsKey(q *readmodel.DeadLetterQuery) string {
	if q.AsOf != "" {
		return ""
	}
	return fmt.Sprintf("%q", []string{q.SagaType, q.Key, q.Reason, q.MessageType, string(q.State), q.Fingerprint,
		string(q.Archived), q.ArchivedBefore.UTC().Format(time.RFC3339Nano), fmt.Sprint(q.Limit)})
}

// get returns a copy of the answer kept for key, if it is fresh, and the
// generation to pass to put otherwise.
func (c *groupsCache) get(key string, now time.Time) ([]readmodel.DeadLetterGroup, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || key == "" || now.Sub(e.at) >= GroupsCacheTTL || now.Before(e.at) {
		return nil, c.gen, false
	}
	return slices.Clone(e.gs), c.gen, true
}

// put keeps a copy of gs for key, read from at (before the query ran),
// unless the cache was dropped since get returned gen: a write during the
// query may be missing from gs.
func (c *groupsCache) put(key string, gen uint64, at time.Time, gs []readmodel.DeadLetterGroup) {
	if key == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.m == nil || len(c.m) >= 256 {
		c.m = map[string]groupsEntry{}
	}
	c.m[key] = groupsEntry{at: at, gs: slices.Clone(gs)}
}

// drop forgets every answer: dead letters changed.
func (c *groupsCache) drop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.m = nil
	c.gen++
}

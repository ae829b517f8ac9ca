package idem

import (
	"fmt"
)

// poolLoops counts the connections an engine holds besides its lanes: the
// timer poller, the sweeper, and either the queue listener (when the store
// is the transport's queue, one Receive keeps a connection listening) or
// the outbox relay.
const poolLoops = 3

// checkPool refuses an engine whose loops need more connections at once
// than the store's pool holds (size, from store.PoolSizer): each of the Lanes units
// of work open at once (shared by every consumer) holds one, and the loops
// one each. With fewer, a lane waits for a connection that another part
// may hold indefinitely (the queue listener does), and even Publish blocks
// until its deadline. queue says whether the store is also the transport.
// A store that does not report a size, or reports 0, is not checked.
func checkPool(size int, cfg Config, queue bool) error {
	if size <= 0 {
		return nil
	}
	need := cfg.Lanes + poolLoops
	if size < need {
		third := "the outbox relay"
		if queue {
			third = "the queue listener"
		}
		return fmt.Errorf("idem: start: the store's connection pool holds %d connections, but this engine needs %d at once: "+
			"Lanes %d, plus %s, the timer poller and the sweeper; "+
			"raise the pool's size to at least %d (pgstore.Config.MaxConns, whose default fits the default Config) or lower Config.Lanes",
			size, need, cfg.Lanes, third, need)
	}
	return nil
}

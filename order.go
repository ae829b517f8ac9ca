package idem

import (
	"context"
	"sync"

	"github.com/idemhq/idem/store"
)

// keyOrder keeps the messages of one saga key in the order they were
// received when several consumers of one engine take batches from one
// stream (Config.Consumers > 1 without Config.PartitionedReceive). The
// consumers receive in turn (turn), and each batch's lanes record
// themselves as the latest holder of their keys before the next receive; a
// lane then waits for the lanes of earlier batches that hold one of its
// keys to end before it loads. Waits only ever point at earlier batches,
// so they cannot form a cycle, and batches with disjoint keys overlap:
// one batch's commit runs while the next one is received and loaded.
type keyOrder struct {
	// turn is held across one receive and the registration of its keys.
	// A channel rather than a sync.Mutex: a consumer waiting for its turn
	// is then durably blocked, as testing/synctest requires.
	turn chan struct{}

	mu   sync.Mutex
	last map[store.Key]chan struct{} // the latest lane holding each key
}

// keyOrderFor returns the key order of an engine whose consumers take
// turns on one stream (Config.Consumers > 1 without partitions), or nil.
func keyOrderFor(cfg *Config, caps capabilities) *keyOrder {
	if cfg.Consumers == 1 || (caps.partitioned != nil && cfg.PartitionedReceive) {
		return nil
	}
	return newKeyOrder()
}

func newKeyOrder() *keyOrder {
	return &keyOrder{turn: make(chan struct{}, 1), last: map[store.Key]chan struct{}{}}
}

// laneRun is one lane of a batch, with the earlier lanes it waits for and
// the channel it closes when it ends (both nil without a key order).
type laneRun struct {
	items []*item
	keys  []store.Key
	after []chan struct{}
	done  chan struct{}
}

// register makes laneRuns of a batch's lanes; with o set, it records them
// as the latest holders of their saga keys and gives each the earlier
// lanes it must wait for. Call it in the consumer's turn.
func (o *keyOrder) register(lanes [][]*item) []*laneRun {
	out := make([]*laneRun, len(lanes))
	for i, items := range lanes {
		out[i] = &laneRun{items: items}
	}
	if o == nil {
		return out
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, lr := range out {
		lr.done = make(chan struct{})
		seen := map[store.Key]bool{}
		for _, it := range lr.items {
			if it.reason != "" || (it.m == nil && it.h == nil) { // bad input: no order to keep
				continue
			}
			k := it.orderKey()
			if seen[k] {
				continue
			}
			seen[k] = true
			lr.keys = append(lr.keys, k)
			if prev, ok := o.last[k]; ok {
				lr.after = append(lr.after, prev)
			}
			o.last[k] = lr.done
		}
	}
	return out
}

// end marks the lane as ended: its successors may load, and the keys it
// still holds are forgotten.
func (o *keyOrder) end(lr *laneRun) {
	if o == nil {
		return
	}
	o.mu.Lock()
	for _, k := range lr.keys {
		if o.last[k] == lr.done {
			delete(o.last, k)
		}
	}
	o.mu.Unlock()
	close(lr.done)
}

// wait blocks until the lanes lr comes after have ended, or ctx ends (the
// engine is aborting: the lane then fails fast and its deliveries are
// handed out again).
func (lr *laneRun) wait(ctx context.Context) {
	for _, c := range lr.after {
		select {
		case <-c:
		case <-ctx.Done():
			return
		}
	}
}

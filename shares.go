package idem

import (
	"context"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// shareRefresh is how often a replica reads the others' heartbeats to
// find its share of the queue: a replica that starts takes its share
// within about a second, whatever Config.HeartbeatInterval.
const shareRefresh = time.Second

// shareStealAfter is how long a message of another replica's share waits
// before a replica whose own share is empty takes it: a replica that is
// gone (its share counts until its heartbeats stop, three intervals) or
// one that is behind does not hold its messages up for longer. It trades
// conflicts for a faster drain: a stolen message races its owner for its
// saga when the owner is busy with the same key. At 1 s, 16 replicas
// draining a backlog stole at its tail and ran 101 conflicts and 0.48 of
// one replica's throughput; without stealing, 4 and 0.65
// (docs/scaling.md). A crashed replica's leased messages wait for their
// lease (30 s by default) anyway.
const shareStealAfter = 5 * time.Second

// shareSummary is the heartbeat's summary key that marks a replica taking
// a share, with shareScheme its value: only replicas with the same scheme
// count in the split, so that a replica that reads the whole queue (an
// older build, PartitionedReceive, Limits) or splits it another way
// leaves no share unread: replicas that agree cover every key, and the
// others only overlap them.
const shareSummary = "queue_share"

// shareScheme names how this build splits the queue: the ranges of the
// key hash of transport.ShareOf, by position in the replicas' IDs.
const shareScheme = "range/1"

// shares is the service that splits a queue several replicas consume
// (transport.SharedConsumer, pgstore's) among them by partitions of the
// saga keys: each running replica that takes a share, ordered by
// replica ID, reads its own partition of as many as there are. Replicas
// that share keys race for the same sagas, and one of each race
// re-applies its unit of work (a conflict); with shares a key's messages
// stay in one replica while the replicas are stable. A share is a
// preference, not a lock: a replica whose own partition is empty takes
// the others' messages once they have waited shareStealAfter, so a
// replica that is gone or slow does not strand its share while the
// others have time, and replicas that briefly disagree on the split only
// race as they would without. A replica whose consumers take nothing
// for withdrawAfter (stuck handlers) stops offering its share in its
// heartbeats (advertise), and the others split its keys.
// It is on whenever the transport is the store's own queue and a
// SharedConsumer, the store keeps heartbeats (store.ReplicaRegistry),
// Config.PartitionedReceive is off (its consumers each read a partition
// of their own) and no Limits are declared (admission receives from the
// whole queue). A consumer that would claim inside a unit of work
// (Consumers 1) claims only while its replica's share is the whole queue.
type shares struct {
	*base
	sc transport.SharedConsumer
	rr store.ReplicaRegistry
	id string // this replica's ID
	// steal is how long another share's message waits before this
	// replica takes it with its own share empty: shareStealAfter.
	steal time.Duration
	cur   atomic.Pointer[transport.Share]
	// receiving counts the consumers inside a receive (or a claim), and
	// lastTake is when one last entered or left one (Unix nanoseconds):
	// a replica none of whose consumers took anything for withdrawAfter
	// is stuck (its lanes held by handlers that do not return), and
	// withdraws from the split (advertise).
	receiving atomic.Int32
	lastTake  atomic.Int64
	// defs are this replica's definitions' fingerprints (Replica.
	// Definitions), set by join: only replicas running the same
	// definitions split the queue among themselves.
	defs map[string]string
}

// withdrawAfter is how long a replica's consumers may go without taking
// anything before its heartbeats stop offering its share: three heartbeat
// intervals, the time a replica whose loop failed still counts.
func (s *shares) withdrawAfter() time.Duration {
	return store.ReplicaGoneBeats * s.cfg.HeartbeatInterval
}

// took marks that a consumer entered (+1) or left (-1) a receive or claim.
func (s *shares) took(delta int32) {
	s.receiving.Add(delta)
	s.lastTake.Store(s.cfg.Clock().UnixNano())
}

// advertise sets the summary of the heartbeat about to be written:
// taking a share (shareScheme) while the consumers take work, none once
// they have taken nothing for withdrawAfter, so the others split its
// share among themselves until it takes work again.
func (s *shares) advertise(cfg map[string]string, now time.Time) {
	last := time.Unix(0, s.lastTake.Load())
	if s.receiving.Load() > 0 || now.Sub(last) < s.withdrawAfter() {
		cfg[shareSummary] = shareScheme
		return
	}
	delete(cfg, shareSummary)
}

// newShares returns the shares of replica id, or nil when the engine
// takes none.
func newShares(b *base, id string) *shares {
	sc, ok := b.tr.(transport.SharedConsumer)
	rr, _ := b.store.(store.ReplicaRegistry)
	// The heartbeats must be the queue's own replicas': the store's queue.
	if !ok || rr == nil || !b.caps.queue || b.cfg.PartitionedReceive {
		return nil
	}
	s := &shares{base: b, sc: sc, rr: rr, id: id, steal: shareStealAfter}
	s.cur.Store(&transport.Share{Parts: 1, StealAfter: s.steal})
	s.lastTake.Store(b.cfg.Clock().UnixNano())
	return s
}

// receive receives this replica's share.
func (s *shares) receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	s.took(1)
	defer s.took(-1)
	return s.sc.ReceiveShare(ctx, max, s.current)
}

// current is this replica's share as last refreshed.
func (s *shares) current() transport.Share {
	return *s.cur.Load()
}

// join writes this replica's first heartbeat and reads its share, before
// its consumers receive: a replica that joins running ones takes its
// share from its first batch, not the whole queue (they shrink theirs at
// their next refresh).
func (s *shares) join(ctx context.Context, h *heartbeat) {
	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	s.defs = h.definitions
	h.beat(ctx, h.replica(), false)
	s.refresh(ctx)
}

// joinTimeout bounds join, which Start waits for: a store that hangs
// leaves the replica with the whole queue until its first refresh.
const joinTimeout = 5 * time.Second

// run refreshes the share every shareRefresh until ctx ends. A failed
// read keeps the last share: the steal covers what it gets wrong.
func (s *shares) run(ctx context.Context) error {
	s.refresh(ctx)
	repeat(ctx, shareRefresh, s.refresh)
	return nil
}

// shareScan bounds the heartbeats one refresh reads.
const shareScan = 1000

func (s *shares) refresh(ctx context.Context) {
	rs, err := s.rr.Replicas(ctx, shareScan)
	if err != nil {
		if ctx.Err() == nil {
			s.log.DebugContext(ctx, "read the replicas for the queue's shares", "error", err)
		}
		return
	}
	sh := split(rs, s.id, s.defs, s.cfg.Clock())
	sh.StealAfter = s.steal
	s.cur.Store(&sh)
}

// split is replica id's share among the replicas rs that are alive at
// now, take a share under this build's scheme, and run the definitions
// defs, ordered by ID (id counts whether listed or not). Replicas of other
// definitions (a rolling deploy's old and new builds) do not count each
// other, so each build reads the keys as if alone: a saga in a state only
// the new build knows, whose message the old build gives back, is never
// pinned to an old replica's share.
func split(rs []store.Replica, id string, defs map[string]string, now time.Time) transport.Share {
	ids := []string{id}
	for i := range rs {
		r := &rs[i]
		if r.ID != id && r.Config[shareSummary] == shareScheme && maps.Equal(r.Definitions, defs) && r.State(now) == store.ReplicaAlive {
			ids = append(ids, r.ID)
		}
	}
	slices.Sort(ids)
	return transport.Share{Part: slices.Index(ids, id), Parts: len(ids)}
}

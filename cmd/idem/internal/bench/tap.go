package bench

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// tap is a pgstore.Store that the engine uses as its store and its queue,
// as a deployment would, and that notes when each delivery was claimed and
// when the unit of work that consumed it committed (deliveries are told
// apart by headerSeq). Every SQL statement is still pgstore's: the wrapper
// only delegates.
type tap struct {
	*pgstore.Store

	mu        sync.Mutex
	claimed   []time.Time // by stream position
	committed []time.Time // by stream position; first commit
	remaining int
	done      chan struct{} // closed when every delivery has committed
	doneAt    time.Time
	doneTrips int64 // RoundTrips when done

	timing Breakdown // totals, in seconds

	// claimTx lets the engine claim inside units of work (ClaimTx);
	// claimedInTx counts the deliveries it claimed that way.
	claimTx     bool
	claimedInTx int64

	// firstSeq, with a separate transport, maps a message ID to the
	// stream position of its first copy: a message is done when its inbox
	// record commits (the broker may drop the other copies).
	firstSeq map[string]int
}

// byID makes the tap count distinct messages of w by their inbox records,
// for a separate transport. A saga's inbox record names its message by
// type and ID (inboxMessageID).
func (t *tap) byID(w *Workload) {
	t.firstSeq = make(map[string]int, w.Distinct)
	for i, d := range w.Deliveries {
		if _, ok := t.firstSeq[inboxMessageID(d.ID)]; !ok {
			t.firstSeq[inboxMessageID(d.ID)] = i
		}
	}
	t.remaining = len(t.firstSeq)
}

// transportTap notes when a separate transport's deliveries were received.
type transportTap struct {
	transport.Transport
	t *tap
}

func (tt *transportTap) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	start := time.Now()
	ds, err := tt.Transport.Receive(ctx, max)
	tt.t.received(start, ds)
	return ds, err
}

// partitionedTap is a transportTap over a transport that hands out
// partitions, so that the engine's consumers keep to their own keys as
// they do without the tap.
type partitionedTap struct {
	*transportTap
	p transport.PartitionedConsumer
}

func (pt *partitionedTap) ReceivePartition(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	start := time.Now()
	ds, err := pt.p.ReceivePartition(ctx, max, part, parts)
	pt.t.received(start, ds)
	return ds, err
}

// tapTransport wraps a separate transport in the tap, keeping its
// partitioned consumption when it has one.
func tapTransport(tr transport.Transport, t *tap) transport.Transport {
	tt := &transportTap{Transport: tr, t: t}
	if p, ok := tr.(transport.PartitionedConsumer); ok {
		return &partitionedTap{transportTap: tt, p: p}
	}
	return tt
}

// Breakdown is where the engine's time went in the throughput phase, as
// totals over the phase: receive calls, units of work, and the seconds
// spent in each step of a unit of work (summed over lanes, so with several
// lanes they may add up to more than the wall time).
type Breakdown struct {
	Receives    int64   `json:"receives"`
	UnitsOfWork int64   `json:"units_of_work"`
	ReceiveSec  float64 `json:"receive_sec"`
	BeginSec    float64 `json:"begin_sec"`  // waiting for a pooled connection
	LoadSec     float64 `json:"load_sec"`   // BEGIN and the loads: one round trip
	ApplySec    float64 `json:"apply_sec"`  // in Go between load and commit
	CommitSec   float64 `json:"commit_sec"` // the writes and COMMIT: one round trip
}

func (t *tap) add(f func(b *Breakdown)) {
	t.mu.Lock()
	f(&t.timing)
	t.mu.Unlock()
}

func newTap(st *pgstore.Store, n int) *tap {
	return &tap{
		Store:   st,
		claimed: make([]time.Time, n), committed: make([]time.Time, n), remaining: n, done: make(chan struct{}),
	}
}

var (
	_ store.Queue                   = (*tap)(nil)
	_ transport.PartitionedConsumer = (*tap)(nil)
	_ store.QueueUnitOfWork         = (*tapUnitOfWork)(nil)
	_ store.ClaimUnitOfWork         = (*tapClaimUnitOfWork)(nil)
)

func seqOf(d *transport.Delivery) (int, bool) {
	i, err := strconv.Atoi(d.Envelope.Headers[headerSeq])
	return i, err == nil
}

// Receive notes when deliveries were claimed.
func (t *tap) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	return t.ReceivePartition(ctx, max, 0, 1)
}

// ReceivePartition is Receive for one partition of the keys.
func (t *tap) ReceivePartition(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	start := time.Now()
	ds, err := t.Store.ReceivePartition(ctx, max, part, parts)
	t.received(start, ds)
	return ds, err
}

// ReceiveShare is ReceivePartition for a replica's share of the queue.
func (t *tap) ReceiveShare(ctx context.Context, max int, share func() transport.Share) ([]transport.Delivery, error) {
	start := time.Now()
	ds, err := t.Store.ReceiveShare(ctx, max, share)
	t.received(start, ds)
	return ds, err
}

// ReceiveAdmitted is ReceivePartition through flow-control admission.
func (t *tap) ReceiveAdmitted(ctx context.Context, p *store.ReceiveParams) ([]transport.Delivery, error) {
	start := time.Now()
	ds, err := t.Store.ReceiveAdmitted(ctx, p)
	t.received(start, ds)
	return ds, err
}

// received notes a receive that started at start and returned ds.
func (t *tap) received(start time.Time, ds []transport.Delivery) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timing.Receives++
	t.timing.ReceiveSec += now.Sub(start).Seconds()
	for i := range ds {
		if s, ok := seqOf(&ds[i]); ok && s >= 0 && s < len(t.claimed) && t.claimed[s].IsZero() {
			t.claimed[s] = now
		}
	}
}

// Begin wraps pgstore's unit of work to see what it consumes.
func (t *tap) Begin(ctx context.Context) (store.UnitOfWork, error) {
	start := time.Now()
	u, err := t.Store.Begin(ctx)
	if err != nil {
		return nil, err
	}
	d := time.Since(start).Seconds()
	t.add(func(b *Breakdown) { b.BeginSec += d })
	tu := &tapUnitOfWork{QueueUnitOfWork: u.(store.QueueUnitOfWork), t: t}
	if c, ok := u.(store.ClaimUnitOfWork); ok && t.claimTx {
		return &tapClaimUnitOfWork{tapUnitOfWork: tu, c: c}, nil
	}
	return tu, nil
}

// tapClaimUnitOfWork is a tapUnitOfWork that lets the engine claim inside
// it (ClaimTx). A claim counts as a receive in the breakdown.
type tapClaimUnitOfWork struct {
	*tapUnitOfWork
	c store.ClaimUnitOfWork
}

func (u *tapClaimUnitOfWork) Claim(ctx context.Context, n, part, parts int) ([]transport.Delivery, error) {
	start := time.Now()
	ds, err := u.c.Claim(ctx, n, part, parts)
	u.t.received(start, ds)
	u.t.mu.Lock()
	u.t.claimedInTx += int64(len(ds))
	u.t.mu.Unlock()
	return ds, err
}

// Return passes a claimed delivery back to the queue at commit.
func (u *tapClaimUnitOfWork) Return(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	return u.c.Return(ctx, d, delay)
}

// Lease turns the claim into a lease and ends the unit of work.
func (u *tapClaimUnitOfWork) Lease(ctx context.Context) ([]transport.Delivery, error) {
	return u.c.Lease(ctx)
}

type tapUnitOfWork struct {
	store.QueueUnitOfWork
	t      *tap
	seqs   []int
	loaded time.Time
}

func (u *tapUnitOfWork) Load(ctx context.Context, p *store.LoadParams) (*store.LoadResult, error) {
	start := time.Now()
	res, err := u.QueueUnitOfWork.Load(ctx, p)
	u.loaded = time.Now()
	d := u.loaded.Sub(start).Seconds()
	u.t.add(func(b *Breakdown) { b.LoadSec += d })
	return res, err
}

func (u *tapUnitOfWork) Consume(ctx context.Context, ds []transport.Delivery) error {
	for i := range ds {
		if s, ok := seqOf(&ds[i]); ok {
			u.seqs = append(u.seqs, s)
		}
	}
	return u.QueueUnitOfWork.Consume(ctx, ds)
}

func (u *tapUnitOfWork) Commit(ctx context.Context, c *store.Changes) error {
	start := time.Now()
	err := u.QueueUnitOfWork.Commit(ctx, c)
	now := time.Now()
	t := u.t
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timing.UnitsOfWork++
	t.timing.CommitSec += now.Sub(start).Seconds()
	if !u.loaded.IsZero() {
		t.timing.ApplySec += start.Sub(u.loaded).Seconds()
	}
	if err != nil {
		return err
	}
	if t.firstSeq != nil {
		for _, in := range c.Inbox {
			if s, ok := t.firstSeq[in.MessageID]; ok {
				u.seqs = append(u.seqs, s)
			}
		}
	}
	for _, s := range u.seqs {
		if s < 0 || s >= len(t.committed) || !t.committed[s].IsZero() {
			continue
		}
		t.committed[s] = now
		t.remaining--
		if t.remaining == 0 {
			t.doneAt = now
			t.doneTrips = t.Store.RoundTrips()
			close(t.done)
		}
	}
	return nil
}

// latencies returns, for every delivery, committed minus from (by stream
// position).
func (t *tap) latencies(from []time.Time) []time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]time.Duration, 0, len(from))
	for i, c := range t.committed {
		if !c.IsZero() && !from[i].IsZero() {
			out = append(out, c.Sub(from[i]))
		}
	}
	return out
}

// inboxMessageID is the message ID of the inbox record the engine writes
// for the workload's message id: the message type and the ID, separated
// by U+001F (the engine's dedup identity includes the type).
func inboxMessageID(id string) string { return incrementType + "\x1f" + id }

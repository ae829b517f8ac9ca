package memtransport

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idemhq/idem/transport"
)

// DefaultLease is the visibility timeout used when Config.Lease is zero.
const DefaultLease = 30 * time.Second

// Config configures a Transport. The zero value (or a nil *Config) gives a
// fault-free FIFO transport with a 30 s lease.
type Config struct {
	// Lease is the visibility timeout: how long a delivery stays invisible
	// to other consumers before it is handed out again if it was not
	// settled. Default 30s (DefaultLease); must not be negative.
	Lease time.Duration

	// Duplicate is the number of extra copies enqueued for each published
	// envelope. Copies are separate entries, delivered (and settled)
	// independently, so they can be handed to different consumers at the
	// same time, like a broker that delivers one publish twice. Each copy
	// starts at Attempt 1. Default 0 (no duplicates); must not be negative.
	Duplicate int

	// DuplicateRandom, when set, enqueues a random number of extra copies,
	// from 0 to Duplicate inclusive, for each envelope instead of exactly
	// Duplicate. Default false.
	DuplicateRandom bool

	// Reorder, when set, makes Receive pick each delivery at random among
	// the correlation ids that have ready entries, instead of handing out
	// entries in publication order. Entries of one correlation id still
	// come out in publication order (a redelivered entry keeps its place);
	// correlation ids are compared in canonical form (Unicode NFC,
	// trimmed), so the NFC and NFD forms of a key are one group;
	// envelopes without a correlation id are each their own group.
	// Default false (FIFO).
	Reorder bool

	// LoseAckRate is the fraction, from 0 to 1, of acks that report
	// success but are silently dropped, so the delivery stays in flight
	// and the message is handed out again after its lease. Default 0.
	LoseAckRate float64

	// MaxMessageBytes is the largest Envelope.Body Publish accepts; Publish
	// refuses a longer one with an error wrapping transport.ErrTooLarge.
	// Default 0: no limit. Must not be negative.
	MaxMessageBytes int

	// DedupWindow, when positive, makes Publish drop an envelope whose
	// transport.PublishID it accepted less than DedupWindow ago, as a
	// JetStream stream's duplicate window drops a Nats-Msg-Id it holds:
	// the window counts from the accepted publish, and a dropped copy
	// neither extends it nor counts in Stats.Published (it counts in
	// Stats.DuplicatesDropped). A deliberate re-publish with a new mark
	// (transport.HeaderRepublish) has another PublishID and is accepted.
	// Default 0: every publish is enqueued. Must not be negative.
	DedupWindow time.Duration

	// Seed seeds the math/rand/v2 source behind DuplicateRandom, Reorder
	// and LoseAckRate. Default 0, which is an ordinary fixed seed: runs
	// are repeatable by default. Random decisions are taken under the
	// Transport's lock in the order calls reach it, so a given Seed
	// reproduces the same faults only for the same sequence of calls
	// (one goroutine, or a deterministic schedule such as a
	// testing/synctest bubble with timing that does not race); with
	// concurrent consumers the interleaving, and so the outcome, varies.
	Seed int64
}

// validate reports the first invalid field of c.
func (c *Config) validate() error {
	switch {
	case c.Lease < 0:
		return fmt.Errorf("config Lease %v: must not be negative", c.Lease)
	case c.Duplicate < 0:
		return fmt.Errorf("config Duplicate %d: must not be negative", c.Duplicate)
	case c.DedupWindow < 0:
		return fmt.Errorf("config DedupWindow %v: must not be negative", c.DedupWindow)
	case c.MaxMessageBytes < 0:
		return fmt.Errorf("config MaxMessageBytes %d: must not be negative", c.MaxMessageBytes)
	case !(c.LoseAckRate >= 0 && c.LoseAckRate <= 1): // also rejects NaN
		return fmt.Errorf("config LoseAckRate %v: must be between 0 and 1", c.LoseAckRate)
	}
	return nil
}

// Stats is a snapshot of a Transport's counters and queue sizes. The
// cumulative counters never decrease; InFlight, Ready and Delayed describe the
// entries not yet acked at the time of the snapshot.
type Stats struct {
	// Published counts envelopes accepted by Publish, copies not included.
	Published int64
	// DuplicatesInjected counts extra copies enqueued because of
	// Config.Duplicate.
	DuplicatesInjected int64
	// DuplicatesDropped counts envelopes Publish dropped because of
	// Config.DedupWindow.
	DuplicatesDropped int64
	// Delivered counts deliveries handed out by Receive, redeliveries
	// included.
	Delivered int64
	// Redelivered counts deliveries with Attempt > 1 (after a lease expiry
	// or a Nack).
	Redelivered int64
	// Acked counts entries settled by an Ack that was not lost.
	Acked int64
	// AcksLost counts acks that reported success but were dropped because
	// of Config.LoseAckRate.
	AcksLost int64
	// Nacked counts deliveries settled by Nack.
	Nacked int64
	// InFlight is the number of entries handed out and neither settled nor
	// expired.
	InFlight int
	// Ready is the number of entries that Receive can hand out now.
	Ready int
	// Delayed is the number of nacked entries waiting for their delay.
	Delayed int
}

// Transport is an in-memory transport.Transport. Create it with New; the zero
// value is not usable. All methods are safe for concurrent use.
//
// Entries live in memory until acked. To answer a late Ack or Nack precisely,
// an acked entry leaves a few bytes behind (its sequence number and last
// delivery) for the Transport's lifetime, which suits tests and demos, not
// unbounded production traffic.
type Transport struct {
	cfg   Config
	lease time.Duration

	mu      sync.Mutex
	rng     *rand.Rand
	closed  bool
	done    chan struct{} // closed by Close
	wake    chan struct{} // closed and replaced to wake blocked Receivers
	waiters int           // Receivers blocked on wake

	nextSeq uint64
	dedup   dedupWindow       // Config.DedupWindow
	entries map[uint64]*entry // not yet acked, by seq
	acked   map[uint64]int32  // acked entries: seq -> generation that acked
	nacks   map[uint64]uint64 // acked entries that were ever nacked: seq -> entry.nacked

	fifo     *readyQueue            // ready entries when !Reorder
	byKey    map[string]*readyQueue // ready entries per group when Reorder
	keys     []*readyQueue          // non-empty queues of byKey
	timed    entryHeap              // in-flight (lease) and delayed (Nack) entries, by deadline
	timer    *time.Timer            // wakes Receivers when the earliest deadline passes
	timerOn  bool                   // timer is armed for timerAt
	timerAt  time.Time
	stats    Stats
	nInFly   int
	nReady   int
	nDelayed int
}

var (
	_ transport.Transport           = (*Transport)(nil)
	_ transport.PartitionedConsumer = (*Transport)(nil)
	_ transport.SizeLimiter         = (*Transport)(nil)
	_ transport.PendingCounter      = (*Transport)(nil)
)

type state uint8

const (
	stateReady state = iota
	stateInFlight
	stateDelayed
)

// entry is one enqueued copy of an envelope, alive until acked.
type entry struct {
	seq      uint64
	env      transport.Envelope
	group    string // ordering group for Reorder
	hash     uint32 // partition hash, for ReceivePartition
	gen      int32  // deliveries so far; the current delivery's Attempt
	open     bool   // delivery gen is not settled yet
	nacked   uint64 // bit g-1 set: delivery g (≤ 64) was settled by Nack
	state    state
	deadline time.Time   // lease expiry (in flight) or ready time (delayed)
	index    int         // position in the heap that holds the entry
	queue    *readyQueue // queue holding the entry while ready
}

// New returns a Transport configured by cfg; nil means all defaults. New
// panics if a field of cfg is invalid (a negative Lease, Duplicate or
// MaxMessageBytes, or a LoseAckRate outside [0, 1]).
func New(cfg *Config) *Transport {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	if err := c.validate(); err != nil {
		panic("memtransport: " + err.Error())
	}
	t := &Transport{
		cfg:     c,
		lease:   c.Lease,
		rng:     rand.New(rand.NewPCG(uint64(c.Seed), 0x1de4_7a2b_9c3d_5e6f)),
		done:    make(chan struct{}),
		wake:    make(chan struct{}),
		entries: make(map[uint64]*entry),
		acked:   make(map[uint64]int32),
		nacks:   make(map[uint64]uint64),
		timed:   entryHeap{byDeadline: true},
	}
	if t.lease == 0 {
		t.lease = DefaultLease
	}
	if c.Reorder {
		t.byKey = make(map[string]*readyQueue)
	} else {
		t.fifo = &readyQueue{}
	}
	return t
}

// Publish enqueues a deep copy of every envelope in msgs, plus the copies
// Config.Duplicate asks for, and wakes blocked Receivers. With
// Config.DedupWindow it drops, and reports as published, an envelope whose
// transport.PublishID it accepted within the window. It is all or
// nothing: an envelope without ID or Type, or with a Body over
// Config.MaxMessageBytes (an error wrapping transport.ErrTooLarge), makes
// Publish return an error before anything is enqueued. Publish returns an
// error wrapping ctx.Err() if ctx is already done, and transport.ErrClosed
// after Close.
func (t *Transport) Publish(ctx context.Context, msgs []transport.Envelope) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("memtransport: publish: %w", err)
	}
	for i := range msgs {
		switch {
		case msgs[i].ID == "":
			return fmt.Errorf("memtransport: publish envelope %d of %d: missing id", i, len(msgs))
		case msgs[i].Type == "":
			return fmt.Errorf("memtransport: publish message %s: missing type", msgs[i].ID)
		case t.cfg.MaxMessageBytes > 0 && len(msgs[i].Body) > t.cfg.MaxMessageBytes:
			return fmt.Errorf("memtransport: publish message %s: body of %d bytes, limit %d: %w", msgs[i].ID, len(msgs[i].Body), t.cfg.MaxMessageBytes, transport.ErrTooLarge)
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("memtransport: publish: %w", transport.ErrClosed)
	}
	now := time.Now()
	for i := range msgs {
		if !t.dedup.accept(transport.PublishID(&msgs[i]), now, t.cfg.DedupWindow) {
			t.stats.DuplicatesDropped++
			continue
		}
		copies := t.cfg.Duplicate
		if t.cfg.DuplicateRandom && copies > 0 {
			copies = t.rng.IntN(copies + 1)
		}
		key := transport.PartitionKey(&msgs[i])
		group := key
		if msgs[i].CorrelationID == "" {
			// Each uncorrelated envelope (with its copies) is its own group.
			group = "\x00" + msgs[i].ID
		}
		hash := transport.PartitionHash(key)
		for c := 0; c <= copies; c++ {
			t.nextSeq++
			e := &entry{seq: t.nextSeq, env: msgs[i].Clone(), group: group, hash: hash}
			t.entries[e.seq] = e
			t.pushReadyLocked(e)
		}
		t.stats.Published++
		t.stats.DuplicatesInjected += int64(copies)
	}
	t.signalLocked()
	return nil
}

// Receive blocks until at least one entry is ready, ctx is done or the
// Transport is closed, and hands out at most max deliveries (max < 1 means
// 1), each with a deep copy of its envelope and a lease of Config.Lease.
// Entries come out in publication order unless Config.Reorder is set; an
// entry handed out again keeps its original place. Receive returns an error
// wrapping ctx.Err() when ctx is done and transport.ErrClosed after Close;
// it never returns an empty slice with a nil error.
func (t *Transport) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	return t.receive(ctx, max, 0, 1)
}

// ReceivePartition is Receive restricted to the entries whose partition
// key (the canonical CorrelationID, or the ID without one) hashes to part
// modulo parts, with PostgreSQL's hashtext as pgstore does. It returns an
// error unless 0 <= part < parts.
func (t *Transport) ReceivePartition(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	if parts < 1 || part < 0 || part >= parts {
		return nil, fmt.Errorf("memtransport: receive partition %d of %d: want 0 <= part < parts", part, parts)
	}
	return t.receive(ctx, max, part, parts)
}

func (t *Transport) receive(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	if max < 1 {
		max = 1
	}
	waiting := false
	t.mu.Lock()
	for {
		if waiting {
			t.waiters--
			waiting = false
		}
		if t.closed {
			t.mu.Unlock()
			return nil, fmt.Errorf("memtransport: receive: %w", transport.ErrClosed)
		}
		if err := ctx.Err(); err != nil {
			t.mu.Unlock()
			return nil, fmt.Errorf("memtransport: receive: %w", err)
		}
		now := time.Now()
		t.promoteLocked(now)
		if ds := t.takeLocked(now, max, part, parts); len(ds) > 0 {
			t.mu.Unlock()
			return ds, nil
		}
		t.waiters++
		waiting = true
		t.armTimerLocked()
		wake := t.wake
		t.mu.Unlock()
		select {
		case <-wake:
		case <-t.done:
		case <-ctx.Done():
		}
		t.mu.Lock()
	}
}

// Ack settles every delivery in ds as done; the entry is then never handed
// out again. Acking an already settled delivery does nothing and is not an
// error. Acking a delivery whose lease expired is accepted as long as the
// entry was not handed out again; otherwise that delivery's error wraps
// transport.ErrLeaseLost. The other deliveries of ds are settled regardless,
// and the errors are joined. An ack may be dropped on purpose, reporting
// success, according to Config.LoseAckRate. Ack does not look at ctx; it
// returns transport.ErrClosed after Close.
func (t *Transport) Ack(ctx context.Context, ds []transport.Delivery) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("memtransport: ack: %w", transport.ErrClosed)
	}
	var errs []error
	for i := range ds {
		if err := t.ackLocked(&ds[i]); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (t *Transport) ackLocked(d *transport.Delivery) error {
	e, gen, err := t.lookupLocked("ack", d)
	if e == nil || err != nil {
		return err
	}
	if !e.open {
		return nil // nacked already
	}
	if t.cfg.LoseAckRate > 0 && t.rng.Float64() < t.cfg.LoseAckRate {
		t.stats.AcksLost++
		return nil
	}
	t.detachLocked(e)
	delete(t.entries, e.seq)
	t.acked[e.seq] = gen
	if e.nacked != 0 {
		t.nacks[e.seq] = e.nacked
	}
	t.stats.Acked++
	return nil
}

// Nack settles d and makes its entry ready again no sooner than delay from
// now (a delay ≤ 0 means at once); it is then handed out with Attempt + 1.
// Nacking an already settled delivery does nothing and is not an error, even
// after the entry was handed out again (Ack likewise); nacking a delivery
// whose lease expired and whose entry was handed out again returns an error
// wrapping transport.ErrLeaseLost. (Past an entry's 64th delivery, a nacked
// delivery settled again after redelivery is reported as a lost lease.) Nack does not look at ctx; it returns
// transport.ErrClosed after Close.
func (t *Transport) Nack(ctx context.Context, d transport.Delivery, delay time.Duration) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("memtransport: nack: %w", transport.ErrClosed)
	}
	e, _, err := t.lookupLocked("nack", &d)
	if e == nil || err != nil || !e.open {
		return err
	}
	t.detachLocked(e)
	e.open = false
	if e.gen <= 64 {
		e.nacked |= 1 << (e.gen - 1)
	}
	t.stats.Nacked++
	if delay <= 0 {
		t.pushReadyLocked(e)
		t.signalLocked()
		return nil
	}
	e.state = stateDelayed
	e.deadline = time.Now().Add(delay)
	heap.Push(&t.timed, e)
	t.nDelayed++
	t.armTimerLocked()
	return nil
}

// lookupLocked finds the entry of the current delivery d. It returns a nil
// entry and a nil error when d is settled already (acked, or nacked before
// its entry was handed out again), and an error when d lost its lease to a
// newer delivery or its token is unknown.
func (t *Transport) lookupLocked(op string, d *transport.Delivery) (*entry, int32, error) {
	seq, gen, ok := parseToken(d.Token)
	if !ok {
		return nil, 0, fmt.Errorf("memtransport: %s message %s: malformed delivery token %q", op, d.Envelope.ID, d.Token)
	}
	var (
		cur    int32
		nacked uint64
		found  bool
	)
	e := t.entries[seq]
	if e != nil {
		cur, nacked, found = e.gen, e.nacked, true
	} else {
		cur, found = t.acked[seq]
		nacked = t.nacks[seq]
	}
	switch {
	case !found || gen > cur:
		return nil, 0, fmt.Errorf("memtransport: %s message %s: unknown delivery token %q", op, d.Envelope.ID, d.Token)
	case gen < cur && gen <= 64 && nacked&(1<<(gen-1)) != 0:
		return nil, 0, nil // nacked, then handed out again
	case gen < cur:
		return nil, 0, fmt.Errorf("memtransport: %s message %s attempt %d: %w", op, d.Envelope.ID, gen, transport.ErrLeaseLost)
	case e == nil:
		return nil, 0, nil // acked by this delivery
	}
	return e, gen, nil
}

// Close marks the Transport closed, wakes blocked Receivers and stops its
// timer. Afterwards every method of transport.Transport, Close included,
// and Pending return transport.ErrClosed; Stats and Unsettled keep
// working.
func (t *Transport) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return fmt.Errorf("memtransport: close: %w", transport.ErrClosed)
	}
	t.closed = true
	close(t.done)
	if t.timer != nil {
		t.timer.Stop()
		t.timerOn = false
	}
	return nil
}

// Stats returns a snapshot of the counters and queue sizes. Leases and
// delays that have passed are accounted for first.
func (t *Transport) Stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.closed {
		t.promoteLocked(time.Now())
	}
	s := t.stats
	s.InFlight, s.Ready, s.Delayed = t.nInFly, t.nReady, t.nDelayed
	return s
}

// Pending counts the entries, copies included, that were published and
// not yet acked: ready ones waiting to be handed out (nacked ones waiting
// for their delay included) and unacked ones handed out and neither
// settled nor past their lease. It returns transport.ErrClosed after
// Close; ctx is not used.
func (t *Transport) Pending(ctx context.Context) (ready, unacked int, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return 0, 0, fmt.Errorf("memtransport: pending: %w", transport.ErrClosed)
	}
	t.promoteLocked(time.Now())
	return t.nReady + t.nDelayed, t.nInFly, nil
}

// Unsettled returns the number of entries, copies included, that were
// published and not yet acked (ready, in flight or delayed): the sum of
// Pending's counts. It keeps working after Close.
func (t *Transport) Unsettled() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.entries)
}

// MaxMessageBytes returns Config.MaxMessageBytes, the largest Body Publish
// accepts; 0 means no limit.
func (t *Transport) MaxMessageBytes() int { return t.cfg.MaxMessageBytes }

// takeLocked hands out up to max ready entries of the partition.
func (t *Transport) takeLocked(now time.Time, max, part, parts int) []transport.Delivery {
	var ds []transport.Delivery
	deadline := now.Add(t.lease)
	for len(ds) < max {
		e := t.popReadyLocked(part, parts)
		if e == nil {
			break
		}
		e.gen++
		e.open = true
		e.state = stateInFlight
		e.deadline = deadline
		heap.Push(&t.timed, e)
		t.nInFly++
		t.stats.Delivered++
		if e.gen > 1 {
			t.stats.Redelivered++
		}
		ds = append(ds, transport.Delivery{
			Envelope: e.env.Clone(),
			Attempt:  int(e.gen),
			Token:    formatToken(e.seq, e.gen),
		})
	}
	return ds
}

// promoteLocked makes ready every entry whose lease or delay has passed.
func (t *Transport) promoteLocked(now time.Time) {
	moved := false
	for t.timed.Len() > 0 && !t.timed.items[0].deadline.After(now) {
		e := heap.Pop(&t.timed).(*entry)
		if e.state == stateInFlight {
			t.nInFly--
		} else {
			t.nDelayed--
		}
		t.pushReadyLocked(e)
		moved = true
	}
	if moved {
		t.signalLocked()
	}
}

// detachLocked takes e out of whichever queue or heap holds it.
func (t *Transport) detachLocked(e *entry) {
	switch e.state {
	case stateInFlight:
		heap.Remove(&t.timed, e.index)
		t.nInFly--
	case stateDelayed:
		heap.Remove(&t.timed, e.index)
		t.nDelayed--
	case stateReady:
		q := e.queue
		heap.Remove(&q.h, e.index)
		e.queue = nil
		t.nReady--
		if q.h.Len() == 0 && t.cfg.Reorder {
			t.dropQueueLocked(q)
		}
	}
}

func (t *Transport) pushReadyLocked(e *entry) {
	q := t.fifo
	if t.cfg.Reorder {
		q = t.byKey[e.group]
		if q == nil {
			q = &readyQueue{group: e.group, hash: e.hash}
			t.byKey[e.group] = q
		}
		if q.h.Len() == 0 {
			q.pos = len(t.keys)
			t.keys = append(t.keys, q)
		}
	}
	e.state = stateReady
	e.queue = q
	heap.Push(&q.h, e)
	t.nReady++
}

// popReadyLocked removes and returns the next ready entry of the
// partition, or nil if there is none.
func (t *Transport) popReadyLocked(part, parts int) *entry {
	if t.nReady == 0 {
		return nil
	}
	mine := func(hash uint32) bool { return parts < 2 || int(hash%uint32(parts)) == part }
	q := t.fifo
	if t.cfg.Reorder {
		if parts < 2 {
			q = t.keys[t.rng.IntN(len(t.keys))]
		} else {
			// Every entry of a group has the group's partition.
			var own []*readyQueue
			for _, k := range t.keys {
				if mine(k.hash) {
					own = append(own, k)
				}
			}
			if len(own) == 0 {
				return nil
			}
			q = own[t.rng.IntN(len(own))]
		}
	}
	i := 0 // the heap's first entry is the oldest
	if parts >= 2 && !t.cfg.Reorder {
		i = -1
		for j, e := range q.h.items {
			if mine(e.hash) && (i < 0 || e.seq < q.h.items[i].seq) {
				i = j
			}
		}
		if i < 0 {
			return nil
		}
	}
	e := heap.Remove(&q.h, i).(*entry)
	e.queue = nil
	t.nReady--
	if q.h.Len() == 0 && t.cfg.Reorder {
		t.dropQueueLocked(q)
	}
	return e
}

// dropQueueLocked forgets the empty group queue q.
func (t *Transport) dropQueueLocked(q *readyQueue) {
	last := len(t.keys) - 1
	t.keys[q.pos] = t.keys[last]
	t.keys[q.pos].pos = q.pos
	t.keys[last] = nil
	t.keys = t.keys[:last]
	delete(t.byKey, q.group)
}

// signalLocked wakes every blocked Receiver.
func (t *Transport) signalLocked() {
	if t.waiters > 0 {
		close(t.wake)
		t.wake = make(chan struct{})
	}
}

// armTimerLocked makes sure the timer fires by the earliest lease or delay
// deadline while Receivers are blocked. A timer that fires late for a
// deadline that moved later is harmless: onTimer re-evaluates.
func (t *Transport) armTimerLocked() {
	if t.closed || t.waiters == 0 || t.timed.Len() == 0 {
		return
	}
	at := t.timed.items[0].deadline
	if t.timerOn && !at.Before(t.timerAt) {
		return
	}
	d := time.Until(at)
	if t.timer == nil {
		t.timer = time.AfterFunc(d, t.onTimer)
	} else {
		t.timer.Reset(d)
	}
	t.timerOn, t.timerAt = true, at
}

func (t *Transport) onTimer() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.timerOn = false
	if t.closed {
		return
	}
	t.promoteLocked(time.Now())
	t.armTimerLocked()
}

// formatToken and parseToken encode an entry's seq and delivery generation.
func formatToken(seq uint64, gen int32) string {
	return strconv.FormatUint(seq, 10) + "." + strconv.FormatInt(int64(gen), 10)
}

func parseToken(s string) (seq uint64, gen int32, ok bool) {
	a, b, found := strings.Cut(s, ".")
	if !found {
		return 0, 0, false
	}
	seq, err := strconv.ParseUint(a, 10, 64)
	if err != nil {
		return 0, 0, false
	}
	g, err := strconv.ParseInt(b, 10, 32)
	if err != nil || g < 1 {
		return 0, 0, false
	}
	return seq, int32(g), true
}

// readyQueue holds the ready entries of one group (or all of them when not
// reordering) in publication order.
type readyQueue struct {
	group string
	hash  uint32 // the partition hash of the group's entries
	pos   int    // index in Transport.keys
	h     entryHeap
}

// entryHeap is a container/heap of entries ordered by seq, or by deadline
// then seq. It keeps entry.index up to date so entries can be removed.
type entryHeap struct {
	byDeadline bool
	items      []*entry
}

func (h *entryHeap) Len() int { return len(h.items) }

func (h *entryHeap) Less(i, j int) bool {
	a, b := h.items[i], h.items[j]
	if h.byDeadline && !a.deadline.Equal(b.deadline) {
		return a.deadline.Before(b.deadline)
	}
	return a.seq < b.seq
}

func (h *entryHeap) Swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	h.items[i].index = i
	h.items[j].index = j
}

func (h *entryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(h.items)
	h.items = append(h.items, e)
}

func (h *entryHeap) Pop() any {
	last := len(h.items) - 1
	e := h.items[last]
	h.items[last] = nil
	h.items = h.items[:last]
	e.index = -1
	return e
}

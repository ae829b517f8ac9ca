package natsjs

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idemhq/idem/transport"
)

// Receive hands out up to max deliveries (max < 1 means 1) from any
// partition, blocking until at least one is available, ctx is done or the
// Transport is closed. A pull request that was waiting when Receive gave
// up is kept: what it brings is handed out by a later Receive on its first
// attempt.
func (t *Transport) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	if t.cfg.PublishOnly {
		return nil, ErrPublishOnly
	}
	return t.receive(ctx, max, t.all)
}

// ReceivePartition is Receive restricted to the subject partitions p (see
// Subject) with p modulo parts equal to part, which are pulled from their
// own durable consumers. When parts divides Config.Partitions these are
// exactly the messages whose canonical CorrelationID (or ID without one)
// hashes to part modulo parts, as transport.PartitionedConsumer describes;
// otherwise every key still falls in exactly one part, but not the part
// its hash names, and with parts above Config.Partitions the parts from
// Config.Partitions on receive nothing (they block until ctx is done or
// the Transport is closed). Choose Config.Partitions as a multiple of the
// engine's Config.Consumers.
func (t *Transport) ReceivePartition(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	if t.cfg.PublishOnly {
		return nil, ErrPublishOnly
	}
	if parts < 1 || part < 0 || part >= parts {
		return nil, fmt.Errorf("natsjs: ReceivePartition(part %d, parts %d): want 0 <= part < parts", part, parts)
	}
	var set []int
	for p := part; p < t.cfg.Partitions; p += parts {
		set = append(set, p)
	}
	return t.receive(ctx, max, set)
}

// receive hands out up to max deliveries from the subject partitions of
// set: first messages held from earlier pull requests, then what a
// no-wait pull on each partition brings, else it sends one waiting pull
// request per partition that has none and waits for what they bring.
func (t *Transport) receive(ctx context.Context, max int, set []int) ([]transport.Delivery, error) {
	max = builtinMax(max, 1)
	for {
		if t.isClosed() {
			return nil, transport.ErrClosed
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t.mu.Lock()
		arrived := t.arrived
		ferr := t.fetchErr
		t.fetchErr = nil
		t.mu.Unlock()
		if ferr != nil {
			return nil, t.closedOr(fmt.Errorf("natsjs: fetch: %w", ferr))
		}
		if ds := t.takeLeftovers(ctx, set, max); len(ds) > 0 {
			return ds, nil
		}
		got, err := t.fetchNoWait(set, max)
		if len(got) > 0 {
			return t.handOut(got), nil
		}
		if err != nil {
			return nil, t.closedOr(fmt.Errorf("natsjs: fetch: %w", err))
		}
		if err := t.pullWaiting(set); err != nil {
			return nil, t.closedOr(fmt.Errorf("natsjs: fetch: %w", err))
		}
		select {
		case <-arrived: // a pull request brought a message or ended
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.closed:
			return nil, transport.ErrClosed
		}
	}
}

func builtinMax(a, b int) int { return max(a, b) }

// fetchNoWait pulls, without waiting, up to max messages from the
// partitions of set, taking turns on which partition goes first. It skips
// a partition with a waiting pull request, or with messages such a request
// brought that are not handed out yet: the server hands that request the
// partition's next message, and a later one taken here would overtake it.
func (t *Transport) fetchNoWait(set []int, max int) ([]pending, error) {
	t.mu.Lock()
	first := t.turn
	t.turn++
	var pull []int
	for i := range set {
		// keep appends a message to the leftovers before it clears
		// waiting, so checking both under t.mu leaves no moment where a
		// message a waiting request brought is neither.
		if p := set[(first+i)%len(set)]; !t.waiting[p] && len(t.leftovers[p]) == 0 {
			pull = append(pull, p)
		}
	}
	t.mu.Unlock()
	var got []pending
	var err error
	for _, p := range pull {
		if len(got) >= max {
			break
		}
		start := time.Now()
		b, ferr := t.parts[p].FetchNoWait(max - len(got))
		if ferr != nil {
			err = ferr
			continue
		}
		n := len(got)
		for m := range b.Messages() {
			got = append(got, pending{m, start})
		}
		if len(got) == n && b.Error() != nil {
			err = b.Error()
		}
	}
	return got, err
}

// pullWaiting sends a pull request for one message, waiting up to t.wait,
// on each partition of set that has none waiting; keep collects what it
// brings.
func (t *Transport) pullWaiting(set []int) error {
	t.mu.Lock()
	var pull []int
	for _, p := range set {
		if !t.waiting[p] {
			t.waiting[p] = true
			pull = append(pull, p)
		}
	}
	t.mu.Unlock()
	for i, p := range pull {
		start := time.Now()
		b, err := t.parts[p].Fetch(1, jetstream.FetchMaxWait(t.wait))
		if err != nil {
			t.mu.Lock()
			for _, q := range pull[i:] {
				t.waiting[q] = false
			}
			t.mu.Unlock()
			return err
		}
		go t.keep(p, b, start)
	}
	return nil
}

// keep holds what a waiting pull request on partition p brings for a
// later Receive, and wakes the waiting Receives when a message arrives and
// when the request ends; after Close it returns the messages to the
// server instead.
func (t *Transport) keep(p int, b jetstream.MessageBatch, start time.Time) {
	for m := range b.Messages() {
		t.mu.Lock()
		if t.isClosed() { // Close took the leftovers already
			t.mu.Unlock()
			t.release([]pending{{m, start}})
			continue
		}
		t.leftovers[p] = append(t.leftovers[p], pending{m, start})
		t.wakeLocked()
		t.mu.Unlock()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.waiting[p] = false
	if err := b.Error(); err != nil && !t.isClosed() {
		t.fetchErr = err
	}
	t.wakeLocked()
}

// wakeLocked wakes every waiting Receive; t.mu is held.
func (t *Transport) wakeLocked() {
	close(t.arrived)
	t.arrived = make(chan struct{})
}

// takeLeftovers hands out up to max held messages of the partitions of
// set whose lease is still alive, in the order they arrived per
// partition; the others are dropped and come back from the server. Those
// with less than half of AckWait left are renewed first (renewShort), so
// that the engine's first renewal, a third of AckWait after the
// hand-out, finds their leases alive.
func (t *Transport) takeLeftovers(ctx context.Context, set []int, max int) []transport.Delivery {
	t.mu.Lock()
	var take []pending
	now := time.Now()
	for _, p := range set {
		left := t.leftovers[p]
		i := 0
		for ; i < len(left) && len(take) < max; i++ {
			if now.Before(left[i].start.Add(t.cfg.AckWait - t.margin)) {
				take = append(take, left[i])
			}
		}
		t.leftovers[p] = left[i:]
	}
	t.mu.Unlock()
	if len(take) == 0 {
		return nil
	}
	t.renewShort(ctx, take)
	return t.handOut(take)
}

// renewShort sends an in-progress acknowledgement for each message of ps
// with less than half of AckWait left, and waits until the server has
// received them. A message whose acknowledgement reached the server
// before its lease ran out has its lease counted again from when it was
// sent; the others keep theirs, whatever happened to the acknowledgement
// (it can only lengthen the lease).
func (t *Transport) renewShort(ctx context.Context, ps []pending) {
	sent := time.Now()
	var short []int
	for i, p := range ps {
		if !sent.Before(p.start.Add(t.cfg.AckWait/2)) && p.msg.InProgress() == nil {
			short = append(short, i)
		}
	}
	if len(short) == 0 || t.flush(ctx) != nil {
		return
	}
	received := time.Now() // the server had every acknowledgement by then
	for _, i := range short {
		if received.Before(ps[i].start.Add(t.cfg.AckWait - t.margin)) {
			ps[i].start = sent
		}
	}
}

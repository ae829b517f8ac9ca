package kafka

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/idemhq/idem/transport"
)

// Receive hands out up to max deliveries (max < 1 means 1) from the
// partitions this member of the group owns, in offset order within each:
// records never handed out, records whose lease ran out, and nacked
// records whose delay ended. It joins the group on its first call, and
// blocks until there is at least one, ctx ends, or the transport is
// closed.
func (t *Transport) Receive(ctx context.Context, max int) ([]transport.Delivery, error) {
	return t.receive(ctx, max, 0, 1)
}

// ReceivePartition is Receive restricted to the records whose partition
// key hashes to part modulo parts (transport.PartitionedConsumer). When
// parts divides Config.Partitions, those are the records of the Kafka
// partitions p with p mod parts = part.
func (t *Transport) ReceivePartition(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	if parts < 1 || part < 0 || part >= parts {
		return nil, fmt.Errorf("kafka: ReceivePartition(part %d, parts %d): want 0 <= part < parts", part, parts)
	}
	return t.receive(ctx, max, part, parts)
}

func (t *Transport) receive(ctx context.Context, max, part, parts int) ([]transport.Delivery, error) {
	if max < 1 {
		max = 1
	}
	if err := t.start(); err != nil {
		return nil, err
	}
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		ds, next, ch, err := t.take(max, part, parts)
		if err != nil || len(ds) > 0 {
			return ds, err
		}
		if err := t.wait(ctx, next, ch); err != nil {
			return nil, err
		}
	}
}

// wait waits until next (none when zero), a change of the buffer (ch),
// ctx's end or Close. Its timer ends with it: a Receive woken many times
// keeps none.
func (t *Transport) wait(ctx context.Context, next time.Time, ch <-chan struct{}) error {
	var due <-chan time.Time
	if !next.IsZero() {
		timer := time.NewTimer(time.Until(next))
		defer timer.Stop()
		due = timer.C
	}
	select {
	case <-ch:
	case <-due:
	case <-ctx.Done():
		return ctx.Err()
	case <-t.done:
		return transport.ErrClosed
	}
	return nil
}

// take hands out what is due. With nothing due it returns when the
// earliest lease or delay ends (zero for none) and the channel closed at
// the buffer's next change.
func (t *Transport) take(max, part, parts int) ([]transport.Delivery, time.Time, <-chan struct{}, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, time.Time{}, nil, transport.ErrClosed
	}
	ids := make([]int32, 0, len(t.parts))
	for id := range t.parts {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	// Start at another partition each time, so that a busy one does not
	// starve the others.
	t.rr++
	var out []transport.Delivery
	var next time.Time
	now := time.Now()
	for i := range ids {
		p := t.parts[ids[(i+t.rr)%len(ids)]]
		if p.revoking {
			continue
		}
		for _, r := range p.recs {
			if len(out) == max {
				return out, next, t.changed, nil
			}
			if parts > 1 && int(r.hash%uint32(parts)) != part {
				continue
			}
			switch {
			case r.st == stReady, (r.st == stOut || r.st == stDelayed) && !now.Before(r.until):
				r.st, r.until = stOut, now.Add(t.cfg.Lease)
				r.attempt++
				out = append(out, transport.Delivery{Envelope: r.env.Clone(), Attempt: r.attempt, Token: token(p, r)})
			case r.st == stOut || r.st == stDelayed:
				if next.IsZero() || r.until.Before(next) {
					next = r.until
				}
			}
		}
	}
	return out, next, t.changed, nil
}

// token is "<partition>/<offset>/<epoch>/<attempt>": the record, the
// assignment it was handed out under, and the hand-out.
func token(p *part, r *rec) string {
	return fmt.Sprintf("%d/%d/%d/%d", p.id, r.r.Offset, p.epoch, r.attempt)
}

type tok struct {
	part    int32
	offset  int64
	epoch   uint64
	attempt int
}

func parseToken(d transport.Delivery) (tok, error) {
	f := strings.Split(d.Token, "/")
	if len(f) == 4 {
		p, e1 := strconv.ParseInt(f[0], 10, 32)
		o, e2 := strconv.ParseInt(f[1], 10, 64)
		ep, e3 := strconv.ParseUint(f[2], 10, 64)
		a, e4 := strconv.Atoi(f[3])
		if errors.Join(e1, e2, e3, e4) == nil {
			return tok{part: int32(p), offset: o, epoch: ep, attempt: a}, nil
		}
	}
	return tok{}, fmt.Errorf("kafka: delivery of %s: token %q was not made by this package", d.Envelope.ID, d.Token)
}

// find returns the buffered record of tk, or why there is none: nil, nil
// for a record settled and dropped already, an error wrapping
// transport.ErrLeaseLost for one of a partition given up since. t.mu is
// held.
func (t *Transport) find(d transport.Delivery, tk tok) (*part, *rec, error) {
	p := t.parts[tk.part]
	if p == nil || p.epoch != tk.epoch {
		return nil, nil, fmt.Errorf("kafka: delivery of %s (token %s): %w: partition %d was given up in a rebalance since, and its new owner hands the record out again",
			d.Envelope.ID, d.Token, transport.ErrLeaseLost, tk.part)
	}
	i := sort.Search(len(p.recs), func(i int) bool { return p.recs[i].r.Offset >= tk.offset })
	if i == len(p.recs) || p.recs[i].r.Offset != tk.offset {
		return p, nil, nil
	}
	return p, p.recs[i], nil
}

// settle applies f to the record of each delivery that is still the one
// handed out (fencing), and returns the joined errors. t.mu is held.
func (t *Transport) settle(op string, ds []transport.Delivery, f func(p *part, r *rec)) error {
	var errs []error
	for _, d := range ds {
		tk, err := parseToken(d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		p, r, err := t.find(d, tk)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%s: %w", op, err))
		case r == nil || r.st == stAcked:
		case r.attempt != tk.attempt:
			errs = append(errs, fmt.Errorf("kafka: %s of %s (token %s): %w: the lease expired and the record was handed out again (attempt %d), which is left untouched",
				op, d.Envelope.ID, d.Token, transport.ErrLeaseLost, r.attempt))
		case r.st == stOut:
			f(p, r)
		}
	}
	return errors.Join(errs...)
}

// Ack settles deliveries, then commits, for each partition, the offset
// after its longest prefix of settled records: a record acked after an
// unsettled one is committed with it once that one is settled too. A
// delivery whose lease expired and that was handed out again, or whose
// partition was given up in a rebalance since, returns an error wrapping
// transport.ErrLeaseLost and leaves the newer delivery untouched.
// Acknowledging a settled delivery does nothing. A commit that fails (the
// group is rebalancing, ctx ended) is not Ack's error: the records stay
// acknowledged here, and the next Ack, the commit retried every second,
// or the revoke of their partition commits them.
func (t *Transport) Ack(ctx context.Context, ds []transport.Delivery) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return transport.ErrClosed
	}
	touched := map[*part]bool{}
	err := t.settle("ack", ds, func(p *part, r *rec) {
		r.st = stAcked
		touched[p] = true
	})
	for p := range touched {
		t.advance(p)
	}
	if len(touched) > 0 {
		t.signal()
	}
	t.mu.Unlock()
	if len(touched) > 0 {
		t.commitOrRetry(ctx)
	}
	return err
}

// Nack hands a delivery out again, from this process, no sooner than
// delay from now. Kafka has no per-message delay: the record stays in
// the buffer, unsettled, and its partition's committed offset stays
// before it until it is acked. If its partition moves to another member
// meanwhile, the new owner hands it out at once (the delay is lost, and
// Attempt starts again at 1). Fencing is as for Ack.
func (t *Transport) Nack(_ context.Context, d transport.Delivery, delay time.Duration) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return transport.ErrClosed
	}
	return t.settle("nack", []transport.Delivery{d}, func(_ *part, r *rec) {
		r.st, r.until = stDelayed, time.Now().Add(max(delay, 0))
		t.signal()
	})
}

// ExtendLeases renews the lease of each delivery of ds for Config.Lease
// from now, by this process's clock (transport.LeaseExtender). A delivery
// handed out again, or of a partition given up since, is left untouched
// and its error wraps transport.ErrLeaseLost; a settled one is ignored.
func (t *Transport) ExtendLeases(_ context.Context, ds []transport.Delivery) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return transport.ErrClosed
	}
	now := time.Now()
	return t.settle("extend lease", ds, func(_ *part, r *rec) {
		r.until = now.Add(t.cfg.Lease)
	})
}

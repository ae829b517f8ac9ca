// Package admit is the decision that every store.Limiter shares: given
// the state of the counters a batch of requests needs (live holds, a
// token bucket), it decides each request in order, all or none per
// request. The stores read and lock the counters, call Decide, and write
// back what it took: the decision itself is the same in memory, SQLite
// and PostgreSQL.
package admit

import (
	"errors"
	"math"
	"slices"
	"time"

	"github.com/idemhq/idem/store"
)

// epsilon absorbs the rounding of a refill computed from a microsecond
// clock: a bucket this close to a whole token has it.
const epsilon = 1e-9

// Counter is one counter's state during a decision.
type Counter struct {
	// Live counts the live holds before the decision; Decide adds the
	// holds it grants.
	Live int
	// Tokens is the bucket's content at RefilledAt. A counter without a
	// stored bucket has Fresh set: it starts full.
	Tokens     float64
	RefilledAt time.Time
	Fresh      bool
	// Refilled reports that Decide refilled or took from the bucket:
	// the store writes Tokens and RefilledAt back.
	Refilled bool
}

// Keys returns the distinct counters of reqs that a limit of limits
// governs (a cap or a rate), in (Name, Key) order: the counters a store
// must lock, in the order it must lock them.
func Keys(limits map[string]store.Limit, reqs []store.AdmitRequest) []store.LimitKey {
	var ks []store.LimitKey
	for _, r := range reqs {
		for _, k := range r.Keys {
			if governs(limits, k) {
				ks = append(ks, k)
			}
		}
	}
	slices.SortFunc(ks, store.LimitKey.Compare)
	return slices.Compact(ks)
}

// governs reports whether a limit applies to k.
func governs(limits map[string]store.Limit, k store.LimitKey) bool {
	l, ok := limits[k.Name]
	return ok && (l.Concurrency > 0 || l.Rate > 0)
}

// Validate checks every key of reqs as store.ValidateLimitText does, and
// each holder (non-empty).
func Validate(reqs []store.AdmitRequest) error {
	for _, r := range reqs {
		if r.Holder == "" {
			return &store.RejectedError{Field: "Holder", Err: errors.New("admit request with an empty Holder")}
		}
		if err := store.ValidateLimitText("Holder", r.Holder); err != nil {
			return err
		}
		for _, k := range r.Keys {
			if err := store.ValidateLimitText("Name", k.Name); err != nil {
				return err
			}
			if err := store.ValidateLimitText("Key", k.Key); err != nil {
				return err
			}
		}
	}
	return nil
}

// Decide decides reqs in order at now against cs, which holds a Counter
// for every key Keys returned (a missing one is unlimited). It returns
// the admissions and, for each request, the capped counters it now holds
// (nil when refused). It updates cs: Live counts the granted holds and
// the buckets lose the tokens taken.
func Decide(limits map[string]store.Limit, reqs []store.AdmitRequest, cs map[store.LimitKey]*Counter, now time.Time) ([]store.Admission, [][]store.LimitKey) {
	adm := make([]store.Admission, len(reqs))
	holds := make([][]store.LimitKey, len(reqs))
	for i, r := range reqs {
		keys := distinct(r.Keys)
		if a, ok := check(limits, keys, cs, now); !ok {
			adm[i] = a
			continue
		}
		adm[i].Admitted = true
		for _, k := range keys {
			l, c := limits[k.Name], cs[k]
			if c == nil || !governs(limits, k) {
				continue
			}
			if l.Concurrency > 0 {
				c.Live++
				holds[i] = append(holds[i], k)
			}
			if l.Rate > 0 {
				c.Tokens--
			}
		}
	}
	return adm, holds
}

// check refills the buckets of keys and reports whether every counter
// admits one more request; when one does not, the refusal.
func check(limits map[string]store.Limit, keys []store.LimitKey, cs map[store.LimitKey]*Counter, now time.Time) (store.Admission, bool) {
	for _, k := range keys {
		l, c := limits[k.Name], cs[k]
		if c == nil || !governs(limits, k) {
			continue
		}
		if l.Concurrency > 0 && c.Live >= l.Concurrency {
			return store.Admission{Refused: k}, false
		}
		if l.Rate <= 0 {
			continue
		}
		refill(&l, c, now)
		if c.Tokens < 1-epsilon {
			return store.Admission{Refused: k, Wait: untilToken(l.Rate, c.Tokens)}, false
		}
	}
	return store.Admission{}, true
}

// refill brings c's bucket up to now at l's rate, capped at its size.
func refill(l *store.Limit, c *Counter, now time.Time) {
	size := l.BucketSize()
	if c.Fresh {
		c.Tokens, c.RefilledAt, c.Fresh = size, now, false
	}
	if d := now.Sub(c.RefilledAt); d > 0 {
		c.Tokens += d.Seconds() * l.Rate
	}
	c.Tokens = min(c.Tokens, size)
	if now.After(c.RefilledAt) {
		c.RefilledAt = now
	}
	c.Refilled = true
}

// Refilled returns the tokens a bucket holding tokens at at holds at now
// under l (for LimitUses).
func Refilled(l store.Limit, tokens float64, at, now time.Time) float64 {
	c := &Counter{Tokens: tokens, RefilledAt: at}
	refill(&l, c, now)
	return c.Tokens
}

// untilToken is the time a bucket holding tokens waits for a whole one at
// rate, rounded up to the microsecond so that a wait of that long finds it.
func untilToken(rate, tokens float64) time.Duration {
	secs := (1 - tokens) / rate
	d := time.Duration(math.Ceil(secs*1e6)) * time.Microsecond
	return max(d, time.Microsecond)
}

// distinct returns ks without repeats, in their first order.
func distinct(ks []store.LimitKey) []store.LimitKey {
	if len(ks) < 2 {
		return ks
	}
	out := make([]store.LimitKey, 0, len(ks))
	for _, k := range ks {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

// Candidate is a queue message an admitting receive looks at, in the
// queue's order.
type Candidate struct {
	// Holder is the Token its delivery gets when admitted.
	Holder string
	// PartKey is its partition key (transport.PartitionKey): a refused
	// candidate blocks every later one of its key.
	PartKey string
	// Keys are the counters it needs.
	Keys []store.LimitKey
}

// QueueDecision is what DecideQueue admitted.
type QueueDecision struct {
	// Admitted are the indexes of the admitted candidates, in order.
	Admitted []int
	// Holds are, for each admitted candidate, the capped counters it
	// holds.
	Holds [][]store.LimitKey
	// Wait is the shortest wait of a refusal by a rate (0: none).
	Wait time.Duration
	// Refusals are the candidates refused, in order: each names the
	// counter it waits for. A candidate refused only because an earlier
	// one of its partition key was refused waits for that one's counter.
	Refusals []Refusal
	// Covering are limits every message the receiver consumes needs, with
	// one counter each (store.ReceiveParams.Covering): once one of them
	// admits nothing more, MorePages is false.
	Covering []string

	seen    int                       // candidates decided so far, over every page
	blocked map[string]store.LimitKey // partition keys refused so far, by the counter that refused them
	closed  bool                      // a Covering counter admits nothing more
}

// Refusal is a candidate a QueueDecision refused.
type Refusal struct {
	// Index indexes the candidates of every page as one list, as
	// QueueDecision.Admitted does.
	Index int
	// By is the counter it waits for.
	By store.LimitKey
}

// DecideQueue decides cands in order as Decide does, admitting at most
// max, with the per-key order of a queue: a candidate refused blocks
// every later one of its partition key, which is refused without being
// decided (it takes nothing).
func DecideQueue(limits map[string]store.Limit, cands []Candidate, cs map[store.LimitKey]*Counter, now time.Time, max int) QueueDecision {
	var d QueueDecision
	d.Page(limits, cands, cs, now, max)
	return d
}

// Page decides the next page of candidates, which follow those of the
// earlier pages in the queue's order, as DecideQueue does: the partition
// keys blocked on earlier pages stay blocked, max bounds the admissions
// over every page, and Admitted indexes the candidates of every page as
// one list. cs must hold the counters of this page too.
func (d *QueueDecision) Page(limits map[string]store.Limit, cands []Candidate, cs map[store.LimitKey]*Counter, now time.Time, max int) {
	if d.blocked == nil {
		d.blocked = map[string]store.LimitKey{}
	}
	base := d.seen
	d.seen += len(cands)
	for i, c := range cands {
		if len(d.Admitted) >= max {
			return
		}
		if by, ok := d.blocked[c.PartKey]; ok {
			d.Refusals = append(d.Refusals, Refusal{Index: base + i, By: by})
			continue
		}
		adm, holds := Decide(limits, []store.AdmitRequest{{Holder: c.Holder, Keys: c.Keys}}, cs, now)
		if !adm[0].Admitted {
			d.blocked[c.PartKey] = adm[0].Refused
			d.Refusals = append(d.Refusals, Refusal{Index: base + i, By: adm[0].Refused})
			if w := adm[0].Wait; w > 0 && (d.Wait == 0 || w < d.Wait) {
				d.Wait = w
			}
			continue
		}
		d.Admitted = append(d.Admitted, base+i)
		d.Holds = append(d.Holds, holds[0])
	}
	d.closed = d.closed || Exhausted(limits, d.Covering, cs, now)
}

// Exhausted reports whether the counter (Key "") of one of the limits
// names admits nothing more at now: its cap is reached, or its bucket
// holds no whole token. A counter not in cs, or a limit not in force,
// is not exhausted. It changes nothing in cs.
func Exhausted(limits map[string]store.Limit, names []string, cs map[store.LimitKey]*Counter, now time.Time) bool {
	for _, name := range names {
		k := store.LimitKey{Name: name}
		l, c := limits[name], cs[k]
		if c == nil || !governs(limits, k) {
			continue
		}
		if l.Concurrency > 0 && c.Live >= l.Concurrency {
			return true
		}
		if l.Rate > 0 {
			cc := *c
			refill(&l, &cc, now)
			if cc.Tokens < 1-epsilon {
				return true
			}
		}
	}
	return false
}

// MorePages reports whether an admitting receive should look at the page
// after page pages (numbered from 1), the last of which held got: that
// page was full (PageWindow), fewer than max were admitted, fewer than
// MaxPages were looked at, and no Covering counter is exhausted (no
// later message could be admitted: paging on would lock and read up to
// 28 × max messages only to refuse them, at every receive while a cap
// binds).
func (d *QueueDecision) MorePages(pages, got, max int) bool {
	return got >= PageWindow(pages, max) && len(d.Admitted) < max && pages < MaxPages && !d.closed
}

// PageWindow is how many visible messages page (numbered from 1) of an
// admitting receive of up to max deliveries looks at. The first page is
// max itself: when nothing binds, it admits all it looked at, and the
// receive locks and reads no message it does not lease, as a plain
// receive. Once one page held refusals, the later ones are
// WindowPerDelivery × max, so that a refused backlog is paged past
// quickly.
func PageWindow(page, max int) int {
	if page <= 1 {
		return max
	}
	return WindowPerDelivery * max
}

// WindowPerDelivery is how many visible messages an admitting receive
// looks at per delivery it may return on each page after the first, and
// a fair receive on its one window: WindowPerDelivery ×
// ReceiveParams.Max.
const WindowPerDelivery = 4

// MaxPages bounds the windows an admitting receive looks at in one
// transaction: when a full window admitted fewer than Max, it pages on
// past the last row it saw, up to MaxPages windows in all (Max, then
// 4×Max each: 29×Max messages), carrying the blocked partition keys
// across pages.
const MaxPages = 8

// KeysOf is Keys over candidates.
func KeysOf(limits map[string]store.Limit, cands []Candidate) []store.LimitKey {
	reqs := make([]store.AdmitRequest, len(cands))
	for i, c := range cands {
		reqs[i] = store.AdmitRequest{Holder: c.Holder, Keys: c.Keys}
	}
	return Keys(limits, reqs)
}

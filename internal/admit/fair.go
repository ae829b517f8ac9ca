package admit

import (
	"cmp"
	"slices"

	"github.com/idemhq/idem/transport"
)

// FairRow is a visible queue message as fair order sees it.
type FairRow struct {
	// PartKey is its partition key (transport.PartitionKey).
	PartKey string
	transport.Fairness
	// Earlier counts the visible messages of its partition key before it
	// in the queue's order (a store may stop counting past the window).
	Earlier int
}

// FairClock is a fair queue's state between receives, as start-time fair
// queueing keeps it: V, the start tag of the message admitted last, and
// each share's finish tag. A share absent from Finish, or whose finish is
// at most V, starts at V: a new or idle share joins the current round
// rather than catching up on the rounds it missed. Stores keep it in a
// table, and may drop a share whose finish is at most V.
type FairClock struct {
	V      float64
	Finish map[string]float64
}

// start is the start tag of a share's next message.
func (c *FairClock) start(share string) float64 {
	return max(c.V, c.Finish[share])
}

// Served records the admission of a message of share, whose weight is
// weight: its start tag becomes V, and the share's finish moves 1/weight
// past it.
func (c *FairClock) Served(share string, weight int) {
	if c.Finish == nil {
		c.Finish = map[string]float64{}
	}
	s := c.start(share)
	c.Finish[share] = s + 1/float64(max(weight, 1))
	c.V = s
}

// ServedAll records the admission of rs, in the order given, as Served
// does for each, and returns the shares they belong to, sorted, with
// their finish tags after: what a store writes back with V.
func (c *FairClock) ServedAll(rs []FairRank) (shares []string, finish []float64) {
	for _, r := range rs {
		c.Served(r.Share, r.Weight)
		if !slices.Contains(shares, r.Share) {
			shares = append(shares, r.Share)
		}
	}
	slices.Sort(shares)
	finish = make([]float64, len(shares))
	for i, sh := range shares {
		finish[i] = c.Finish[sh]
	}
	return shares, finish
}

// FairRank is a row's place in fair order.
type FairRank struct {
	// Index is the row's index in the rows ranked.
	Index int
	// Share and Weight are what the row counts under: its own share, at
	// the highest weight among the share's heads.
	Share  string
	Weight int
	// Start is its start tag.
	Start    float64
	Priority int
}

// FairWindow returns the window of n rows that a fair receive decides
// on, in the order it decides them, from rows in the queue's order
// (every visible message, or at least each share's heads: its first n by
// priority, higher first, then queue order). It is the reference that
// the stores' fair receives (store.ReceiveParams.Fair) are held to by
// storetest's FlowQueueFair cases:
//
//  1. Each share keeps its heads; its weight is the highest among them.
//  2. Under clock c (start-time fair queueing) the k-th head (from 0) of
//     a share of weight w starts at c's start of the share plus k/w; the
//     heads are ordered by start tag, then priority, then queue order.
//  3. A head whose partition key has an earlier visible message that is
//     not a head is left out: it must not overtake it.
//  4. The messages of one partition key keep their queue order and go
//     together, at the place of the first of them: an urgent message
//     takes the earlier ones of its saga along instead of overtaking
//     them.
//  5. The first n are the window.
func FairWindow(rows []FairRow, c *FairClock, n int) []FairRank {
	heads := fairHeads(rows, c, n)
	slices.SortFunc(heads, func(a, b FairRank) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Index, b.Index))
	})
	// 3: the heads of each key, in queue order, must be its first
	// visible messages.
	byQueue := slices.Clone(heads)
	slices.SortFunc(byQueue, func(a, b FairRank) int { return cmp.Compare(a.Index, b.Index) })
	seen := map[string]int{}
	ok := map[int]bool{}
	for _, h := range byQueue {
		k := rows[h.Index].PartKey
		ok[h.Index] = rows[h.Index].Earlier == seen[k]
		seen[k]++
	}
	heads = slices.DeleteFunc(heads, func(h FairRank) bool { return !ok[h.Index] })
	// 4: each key at the place of its first head, in queue order.
	first := map[string]int{}
	for pos, h := range heads {
		if _, dup := first[rows[h.Index].PartKey]; !dup {
			first[rows[h.Index].PartKey] = pos
		}
	}
	slices.SortStableFunc(heads, func(a, b FairRank) int {
		return cmp.Or(cmp.Compare(first[rows[a.Index].PartKey], first[rows[b.Index].PartKey]), cmp.Compare(a.Index, b.Index))
	})
	return heads[:min(n, len(heads))]
}

// fairHeads ranks each share's heads (its first n by priority, then
// queue order) with their start tags under c.
func fairHeads(rows []FairRow, c *FairClock, n int) []FairRank {
	shares := map[string][]FairRank{}
	for i, r := range rows {
		shares[r.Key] = append(shares[r.Key], FairRank{Index: i, Share: r.Key, Priority: r.Priority})
	}
	var all []FairRank
	for share, rs := range shares {
		slices.SortStableFunc(rs, func(a, b FairRank) int { return cmp.Compare(b.Priority, a.Priority) })
		rs = rs[:min(n, len(rs))]
		w := 1
		for _, r := range rs {
			w = max(w, rows[r.Index].Weight)
		}
		s := c.start(share)
		for k := range rs {
			rs[k].Weight, rs[k].Start = w, s+float64(k)/float64(w)
		}
		all = append(all, rs...)
	}
	return all
}

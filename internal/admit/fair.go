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

// FairRank is a row's place in fair order.
type FairRank struct {
	// Index is the row's index in the rows ranked.
	Index int
	// Share and Weight are what the row counts under (see FairOrder).
	Share  string
	Weight int
	// Start is its start tag: the order is by Start, then priority
	// (higher first), then queue order.
	Start    float64
	Priority int
}

// FairOrder ranks rows, which are in the queue's order, in fair order
// under clock c (start-time fair queueing): the n-th message (from 0) of
// a share of weight w starts at c's start of the share plus n/w, the
// share's messages ordered by priority (higher first), then queue order;
// the rows are served by start tag, then priority, then queue order. A
// share's weight is the highest among its rows. pgstore computes the same
// in SQL: store.ReceiveParams.Fair documents it, and storetest's
// FlowQueueFair cases hold both to this reference.
//
// The messages of one partition key keep their queue order: they count
// in the share of the key's first message, at the highest priority among
// them, so an urgent message takes the ones of its saga before it along
// instead of overtaking them.
func FairOrder(rows []FairRow, c *FairClock) []FairRank {
	type part struct{ first, prio int }
	parts := map[string]*part{}
	for i, r := range rows {
		if p, ok := parts[r.PartKey]; ok {
			p.prio = max(p.prio, r.Priority)
			continue
		}
		parts[r.PartKey] = &part{first: i, prio: r.Priority}
	}
	shares := map[string][]FairRank{}
	weight := map[string]int{}
	for i, r := range rows {
		p := parts[r.PartKey]
		share := rows[p.first].Key
		shares[share] = append(shares[share], FairRank{Index: i, Share: share, Priority: p.prio})
		weight[share] = max(weight[share], r.Weight, 1)
	}
	all := make([]FairRank, 0, len(rows))
	for share, rs := range shares {
		slices.SortStableFunc(rs, func(a, b FairRank) int { return cmp.Compare(b.Priority, a.Priority) })
		w, s := weight[share], c.start(share)
		for n := range rs {
			rs[n].Weight, rs[n].Start = w, s+float64(n)/float64(w)
		}
		all = append(all, rs...)
	}
	slices.SortFunc(all, func(a, b FairRank) int {
		return cmp.Or(cmp.Compare(a.Start, b.Start), cmp.Compare(b.Priority, a.Priority), cmp.Compare(a.Index, b.Index))
	})
	return all
}

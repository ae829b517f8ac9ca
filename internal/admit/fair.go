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

// FairOrder returns the indexes of rows, which are in the queue's order,
// in fair order: the shares (fairness keys) are served round-robin, a
// share of weight w taking w places per round, and within a share the
// higher priority goes first. pgstore computes the same order in SQL:
// store.ReceiveParams.Fair documents it, and storetest's FlowQueueFair
// cases hold both to it.
//
// The messages of one partition key keep their queue order: they count
// in the share of the key's first message, at the highest priority among
// them, so an urgent message takes the ones of its saga before it along
// instead of overtaking them.
func FairOrder(rows []FairRow) []int {
	type part struct{ first, prio int }
	parts := map[string]*part{}
	for i, r := range rows {
		if p, ok := parts[r.PartKey]; ok {
			p.prio = max(p.prio, r.Priority)
			continue
		}
		parts[r.PartKey] = &part{first: i, prio: r.Priority}
	}
	type ranked struct{ i, prio, round int }
	shares := map[string][]ranked{}
	weight := map[string]int{}
	for i, r := range rows {
		p := parts[r.PartKey]
		share := rows[p.first].Key
		shares[share] = append(shares[share], ranked{i: i, prio: p.prio})
		weight[share] = max(weight[share], r.Weight, 1)
	}
	all := make([]ranked, 0, len(rows))
	for share, rs := range shares {
		slices.SortStableFunc(rs, func(a, b ranked) int { return cmp.Compare(b.prio, a.prio) })
		for n := range rs {
			rs[n].round = n / weight[share]
		}
		all = append(all, rs...)
	}
	slices.SortFunc(all, func(a, b ranked) int {
		return cmp.Or(cmp.Compare(a.round, b.round), cmp.Compare(b.prio, a.prio), cmp.Compare(a.i, b.i))
	})
	out := make([]int, len(all))
	for n, r := range all {
		out[n] = r.i
	}
	return out
}

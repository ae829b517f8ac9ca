package cli

import (
	"strconv"
	"strings"

	"github.com/idemhq/idem"
)

// killPlan delivers the SQLite demo's --kills SIGKILLs on progress, not on
// time, so that a run of any speed gets them all. The workload is split
// into kills+1 shares by saga; the i-th kill is due once the sagas of the
// first i shares are finished, and the share after the next is published
// only once that kill is delivered, so the run cannot finish before it.
// Share j+1 is published once share j is half finished, so that a kill
// lands while the next share is at work.
type killPlan struct {
	shares          [][]idem.Envelope
	searches, kills int
	// released counts the shares published, done the planned kills
	// delivered.
	released, done int
}

// newKillPlan splits envs into kills+1 shares by the saga each names (an
// envelope of no saga, the bad input, goes in the first); the first share
// counts as published.
func newKillPlan(envs []idem.Envelope, searches, kills int) *killPlan {
	p := &killPlan{shares: make([][]idem.Envelope, kills+1), searches: searches, kills: kills, released: 1}
	for _, env := range envs {
		j := 0
		for i := demoSagaOf(env.ID); j < kills && i >= p.bound(j); {
			j++
		}
		p.shares[j] = append(p.shares[j], env)
	}
	return p
}

// demoSagaOf is the index of the search an envelope ID of demoWorkload
// names ("api-search-00012", "s3-search-00012-renotified"); -1 for none.
func demoSagaOf(id string) int {
	_, rest, ok := strings.Cut(id, "search-")
	if !ok {
		return -1
	}
	digits, _, _ := strings.Cut(rest, "-")
	i, err := strconv.Atoi(digits)
	if err != nil {
		return -1
	}
	return i
}

// bound is how many sagas shares 0 to j hold (0 for j -1).
func (p *killPlan) bound(j int) int { return (j + 1) * p.searches / (p.kills + 1) }

// next returns the share to publish now that finished sagas are, or nil:
// share j+1 once share j is half finished and the kills before share j
// are delivered.
func (p *killPlan) next(finished int) []idem.Envelope {
	j := p.released - 1
	if p.released == len(p.shares) || j > p.done || finished < (p.bound(j-1)+p.bound(j))/2 {
		return nil
	}
	p.released++
	return p.shares[j+1]
}

// due tells whether the next planned kill is due now that finished sagas
// are.
func (p *killPlan) due(finished int) bool { return p.done < p.kills && finished >= p.bound(p.done) }

// delivered tells whether every planned kill is.
func (p *killPlan) delivered() bool { return p.done == p.kills }

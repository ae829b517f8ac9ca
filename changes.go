package idem

import (
	"time"

	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// changes is a unit of work's change buffer: what it will write
// (store.Changes) and what is left to do once it commits (laneResult).
// The steps (steps.go) and the per-message decisions (decide.go) fill
// it; it records what they decided, and decides nothing.
type changes struct {
	now     time.Time
	mint    bool // mint a dedup token for each emission (Config.Dedup token)
	res     *laneResult
	ch      *store.Changes
	work    map[store.Key]*working
	timers  map[store.TimerKey]*store.Timer // nil value: cancel
	inBatch map[store.InboxKey]bool
	tokens  map[store.InboxKey]string // token of each tokened message
	claimed map[string]bool           // tokens this unit of work claims
}

func newChanges(now time.Time, mint bool, items []*item) changes {
	return changes{
		now: now, mint: mint, ch: &store.Changes{},
		res:  &laneResult{att: &attempt{items: items, results: make([]result, 0, len(items))}},
		work: map[store.Key]*working{}, timers: map[store.TimerKey]*store.Timer{}, inBatch: map[store.InboxKey]bool{},
	}
}

type nackReq struct {
	d     transport.Delivery
	delay time.Duration
}

type logLine struct {
	it  *item
	rec saga.LogRecord
}

// laneResult is what a committed unit of work leaves to do: the settle
// part's input (settle.go).
type laneResult struct {
	acks   []transport.Delivery
	nacks  []nackReq
	outbox []Envelope
	logs   []logLine
	att    *attempt // what it decided, for the observers
	// returned counts the deliveries a claimed unit of work returned to
	// the queue in its commit (not nacked after it).
	returned int
}

// working is an instance as the lane's unit of work changes it.
type working struct {
	inst    *store.Instance // nil: no saga
	isNew   bool
	changed bool
}

// markSeen records the message of ik in the inbox, and claims its token.
func (c *changes) markSeen(ik store.InboxKey) {
	if tok, ok := c.tokens[ik]; ok && !c.claimed[tok] {
		if c.claimed == nil {
			c.claimed = map[string]bool{}
		}
		c.claimed[tok] = true
		c.ch.ClaimTokens = append(c.ch.ClaimTokens, tok)
	}
	c.inBatch[ik] = true
	c.ch.Inbox = append(c.ch.Inbox, store.InboxEntry{InboxKey: ik, ProcessedAt: c.now})
}

// ack settles it as done in this unit of work.
func (c *changes) ack(it *item) { c.res.acks = append(c.res.acks, it.d) }

// emitted adds a transition's emissions to the outbox, minting their
// tokens with Config.Dedup token.
func (c *changes) emitted(out []Envelope) {
	if c.mint {
		for i := range out {
			out[i].Headers[transport.HeaderToken] = "1"
			c.ch.MintTokens = append(c.ch.MintTokens, store.Token{ID: TokenID(&out[i]), MintedAt: c.now})
		}
	}
	for _, o := range out {
		c.ch.Outbox = append(c.ch.Outbox, store.OutboxMessage{Envelope: o, CreatedAt: c.now})
	}
	c.res.outbox = append(c.res.outbox, out...)
}

// collectWork turns the working instances and timers into changes.
func (c *changes) collectWork() {
	for _, w := range c.work {
		switch {
		case w.isNew:
			c.ch.Inserts = append(c.ch.Inserts, w.inst)
		case w.changed:
			c.ch.Updates = append(c.ch.Updates, w.inst)
		}
	}
	for k, t := range c.timers {
		if t == nil {
			c.ch.CancelTimers = append(c.ch.CancelTimers, k)
		} else {
			c.ch.Timers = append(c.ch.Timers, *t)
		}
	}
}

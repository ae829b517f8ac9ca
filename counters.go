package idem

import (
	"sync"
	"sync/atomic"
	"time"
)

// Stats are cumulative counters of one engine since it was created.
type Stats struct {
	// Received counts deliveries taken from the transport.
	Received int64 `json:"received"`
	// Applied counts messages that ran a saga transition or a handler.
	Applied int64 `json:"applied"`
	// Ignored counts messages a saga ignored (including stale timers).
	Ignored int64 `json:"ignored"`
	// Duplicates counts deliveries skipped because the inbox held them.
	Duplicates int64 `json:"duplicates"`
	// NotFound counts messages that found no saga and could not start one.
	NotFound int64 `json:"not_found"`
	// DeadLettered counts messages recorded as dead letters.
	DeadLettered int64 `json:"dead_lettered"`
	// Conflicts counts units of work that lost an optimistic-concurrency
	// race and were re-applied.
	Conflicts int64 `json:"conflicts"`
	// Retries counts deliveries returned to the transport for another try.
	Retries int64 `json:"retries"`
	// StaleTimers counts timer messages dropped because the saga had
	// unscheduled or rescheduled them, and the responses, timeouts and
	// faults of requests that were no longer pending (saga.Request).
	StaleTimers int64 `json:"stale_timers"`
	// Emitted counts messages written to the outbox (or queue).
	Emitted int64 `json:"emitted"`
	// Relayed counts outbox messages sent by the relay.
	Relayed int64 `json:"relayed"`
	// TimersFired counts timers handed to the transport.
	TimersFired int64 `json:"timers_fired"`
	// Swept counts finished sagas deleted by the sweeper.
	Swept int64 `json:"swept"`
}

// TypeStats are cumulative counters of one saga type (or "idem.handler"
// for plain handlers) since the engine was created. Messages refused before
// their saga was known (unknown type, malformed body) count under "".
type TypeStats struct {
	// Applied, Ignored, Duplicates, NotFound and Retried count committed
	// messages by outcome (see the Outcome constants).
	Applied, Ignored, Duplicates, NotFound, Retried int64
	// DeadLetters counts dead-lettered messages by reason (a Reason
	// constant). Nil when there were none.
	DeadLetters map[string]int64
	// Conflicts counts units of work holding messages of the type that
	// lost an optimistic-concurrency race.
	Conflicts int64
	// LeaseLost counts messages whose transport lease ran out before their
	// unit of work committed; the transport hands them out again.
	LeaseLost int64
	// Redelivered counts committed messages that were delivered more than
	// once (Delivery.Attempt > 1).
	Redelivered int64
	// NonCanonicalKeys counts applied messages whose raw correlation key
	// differed from its canonical form (another Unicode normalisation, say).
	NonCanonicalKeys int64
}

// counters is the observer behind Stats and TypeStats.
type counters struct {
	n struct {
		received, applied, ignored, duplicates, notFound, deadLettered atomic.Int64
		conflicts, retries, staleTimers, emitted, relayed, timersFired atomic.Int64
		swept                                                          atomic.Int64
	}

	byType sync.Map // saga type → *typeCounters
}

// typeCounters are one type's live counters.
type typeCounters struct {
	applied, ignored, dup, notFound, retried, conflicts, leaseLost, redelivered, rawKeys atomic.Int64
	dead                                                                                 sync.Map // reason → *atomic.Int64
}

func (c *counters) received(n int)        { c.n.received.Add(int64(n)) }
func (c *counters) ended(*attempt, error) {}
func (c *counters) retried(n int)         { c.n.retries.Add(int64(n)) }

// committed counts a unit of work that landed. Every lane shares the
// engine's counters and a type's: each is added once per unit of work (a
// type's once per run of messages of that type), not once per message.
func (c *counters) committed(a *attempt, _ time.Duration, _ int) {
	var all, run tally
	typ := ""
	for i, r := range a.results {
		if i > 0 && r.it.typ != typ {
			run.addTo(c.typ(typ))
			run = tally{}
		}
		typ = r.it.typ
		run.count(&r)
		all.count(&r)
	}
	if len(a.results) > 0 {
		run.addTo(c.typ(typ))
	}
	add(&c.n.applied, all.applied)
	add(&c.n.duplicates, all.dup)
	add(&c.n.ignored, all.ignored)
	add(&c.n.notFound, all.notFound)
	add(&c.n.deadLettered, all.dead)
	add(&c.n.staleTimers, all.stale)
	add(&c.n.emitted, all.emitted)
}

// tally is what some results add to the counters.
type tally struct {
	applied, dup, ignored, notFound, retried, dead, stale, emitted, redelivered, rawKeys int64
	reasons                                                                              map[string]int64
}

func (t *tally) count(r *result) {
	o := &r.o
	t.emitted += int64(o.emitted)
	if o.stale {
		t.stale++
	}
	if r.it.d.Attempt > 1 {
		t.redelivered++
	}
	switch o.kind {
	case OutcomeApplied:
		t.applied++
		if r.it.m != nil && r.it.rawKey != r.it.key {
			t.rawKeys++
		}
	case OutcomeDuplicate:
		t.dup++
	case OutcomeIgnored:
		t.ignored++
	case OutcomeNotFound:
		t.notFound++
	case OutcomeRetried:
		t.retried++
	case OutcomeDeadLettered:
		t.dead++
		if t.reasons == nil {
			t.reasons = map[string]int64{}
		}
		t.reasons[o.reason]++
	}
}

// addTo adds the tally to one type's counters.
func (t *tally) addTo(tc *typeCounters) {
	add(&tc.applied, t.applied)
	add(&tc.dup, t.dup)
	add(&tc.ignored, t.ignored)
	add(&tc.notFound, t.notFound)
	add(&tc.retried, t.retried)
	add(&tc.redelivered, t.redelivered)
	add(&tc.rawKeys, t.rawKeys)
	for reason, n := range t.reasons {
		v, ok := tc.dead.Load(reason)
		if !ok {
			v, _ = tc.dead.LoadOrStore(reason, new(atomic.Int64))
		}
		v.(*atomic.Int64).Add(n)
	}
}

func add(n *atomic.Int64, v int64) {
	if v != 0 {
		n.Add(v)
	}
}

func (c *counters) conflicted(items []*item) {
	c.n.conflicts.Add(1)
	seen := make(map[string]bool, 1)
	for _, it := range items {
		if !seen[it.typ] {
			seen[it.typ] = true
			c.typ(it.typ).conflicts.Add(1)
		}
	}
}

func (c *counters) leaseLost(items []*item) {
	for _, it := range items {
		c.typ(it.typ).leaseLost.Add(1)
	}
}

func (c *counters) passed(task BackgroundTask, n, dead int) {
	switch task {
	case TaskRelay:
		c.n.relayed.Add(int64(n))
	case TaskTimers:
		c.n.timersFired.Add(int64(n))
	case TaskSweep:
		c.n.swept.Add(int64(n))
	}
	c.n.deadLettered.Add(int64(dead))
}

func (c *counters) typ(name string) *typeCounters {
	if t, ok := c.byType.Load(name); ok {
		return t.(*typeCounters)
	}
	t, _ := c.byType.LoadOrStore(name, &typeCounters{})
	return t.(*typeCounters)
}

func (c *counters) stats() Stats {
	return Stats{
		Received: c.n.received.Load(), Applied: c.n.applied.Load(), Ignored: c.n.ignored.Load(),
		Duplicates: c.n.duplicates.Load(), NotFound: c.n.notFound.Load(), DeadLettered: c.n.deadLettered.Load(),
		Conflicts: c.n.conflicts.Load(), Retries: c.n.retries.Load(), StaleTimers: c.n.staleTimers.Load(),
		Emitted: c.n.emitted.Load(), Relayed: c.n.relayed.Load(), TimersFired: c.n.timersFired.Load(), Swept: c.n.swept.Load(),
	}
}

func (c *counters) typeStats() map[string]TypeStats {
	out := map[string]TypeStats{}
	c.byType.Range(func(k, v any) bool {
		t := v.(*typeCounters)
		s := TypeStats{
			Applied: t.applied.Load(), Ignored: t.ignored.Load(), Duplicates: t.dup.Load(), NotFound: t.notFound.Load(),
			Retried: t.retried.Load(), Conflicts: t.conflicts.Load(), LeaseLost: t.leaseLost.Load(),
			Redelivered: t.redelivered.Load(), NonCanonicalKeys: t.rawKeys.Load(),
		}
		t.dead.Range(func(r, n any) bool {
			if s.DeadLetters == nil {
				s.DeadLetters = map[string]int64{}
			}
			s.DeadLetters[r.(string)] = n.(*atomic.Int64).Load()
			return true
		})
		out[k.(string)] = s
		return true
	})
	return out
}

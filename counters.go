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

// add adds o's counters to s.
func (s *Stats) add(o Stats) {
	s.Received += o.Received
	s.Applied += o.Applied
	s.Ignored += o.Ignored
	s.Duplicates += o.Duplicates
	s.NotFound += o.NotFound
	s.DeadLettered += o.DeadLettered
	s.Conflicts += o.Conflicts
	s.Retries += o.Retries
	s.StaleTimers += o.StaleTimers
	s.Emitted += o.Emitted
	s.Relayed += o.Relayed
	s.TimersFired += o.TimersFired
	s.Swept += o.Swept
}

// SumStats adds up the counters of several engines (replicas).
func SumStats(es ...*Engine) Stats {
	var s Stats
	for _, e := range es {
		s.add(e.Stats())
	}
	return s
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

func (c *counters) committed(a *attempt, _ time.Duration, _ int) {
	// The engine's counters are shared by every lane: add each once per
	// unit of work. The type's are looked up once per run of a type.
	var applied, dup, ignored, notFound, dead, stale, emitted int64
	var t *typeCounters
	tname := ""
	for _, r := range a.results {
		o := &r.o
		if t == nil || r.it.typ != tname {
			t, tname = c.typ(r.it.typ), r.it.typ
		}
		emitted += int64(o.emitted)
		if o.stale {
			stale++
		}
		if r.it.d.Attempt > 1 {
			t.redelivered.Add(1)
		}
		switch o.kind {
		case OutcomeApplied:
			applied++
			t.applied.Add(1)
			if r.it.m != nil && r.it.rawKey != r.it.key {
				t.rawKeys.Add(1)
			}
		case OutcomeDuplicate:
			dup++
			t.dup.Add(1)
		case OutcomeIgnored:
			ignored++
			t.ignored.Add(1)
		case OutcomeNotFound:
			notFound++
			t.notFound.Add(1)
		case OutcomeRetried:
			t.retried.Add(1)
		case OutcomeDeadLettered:
			dead++
			t.deadLetter(o.reason)
		}
	}
	add := func(n *atomic.Int64, v int64) {
		if v != 0 {
			n.Add(v)
		}
	}
	add(&c.n.applied, applied)
	add(&c.n.duplicates, dup)
	add(&c.n.ignored, ignored)
	add(&c.n.notFound, notFound)
	add(&c.n.deadLettered, dead)
	add(&c.n.staleTimers, stale)
	add(&c.n.emitted, emitted)
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

func (t *typeCounters) deadLetter(reason string) {
	v, ok := t.dead.Load(reason)
	if !ok {
		v, _ = t.dead.LoadOrStore(reason, new(atomic.Int64))
	}
	v.(*atomic.Int64).Add(1)
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

package idem

import (
	"errors"
	"slices"
	"time"

	"github.com/idemhq/idem/store"
)

// outcome is what happened to one message in one attempt of its unit of
// work: the value the per-message steps return, and the one fact every
// observer reads. Nothing infers it from counters.
type outcome struct {
	kind     string // an Outcome constant
	from, to string // an applied transition's states
	reason   string // a dead letter's reason
	err      error  // a dead letter's error
	emitted  int    // messages written to the outbox (or queue)
	stale    bool   // a stale timer, or a request's late outcome
}

// result is one message's outcome in an attempt.
type result struct {
	it *item
	o  outcome
}

// attempt is what one attempt of a unit of work decided, in order: the
// observers' one report about messages.
type attempt struct {
	items   []*item
	results []result
	spans   []MessageSpan // parallel to results, when a Tracer is set
	sends   []SendSpan    // emissions' send spans, when sends are traced
}

// observer is told what the engine's parts did. Stats and TypeStats
// (counters), Config.Observe (observeFunc, which admin's Prometheus
// collector sits behind) and Config.Tracer (tracerObserver) implement it;
// a new counter is a field of one of them. Methods run on the engine's
// goroutines, concurrently, and must not block.
type observer interface {
	// received: a consumer took n deliveries.
	received(n int)
	// ended: an attempt's commit returned err (nil: it committed).
	ended(a *attempt, err error)
	// committed: a unit of work landed, after tries attempts, took after
	// its last Begin; its outcomes are final. Called before it is
	// settled, so that a caller that sees a delivery acknowledged sees it
	// counted.
	committed(a *attempt, took time.Duration, tries int)
	// retried: n deliveries went back to the transport.
	retried(n int)
	// conflicted: a unit of work of items lost an optimistic-concurrency
	// race.
	conflicted(items []*item)
	// leaseLost: the leases of items ran out before their commit.
	leaseLost(items []*item)
	// passed: a background pass handled n rows of task (dead-lettered:
	// TaskRelay's undeliverable messages, counted as dead letters).
	passed(task BackgroundTask, n int, deadLettered int)
}

// observers is every observer of an engine, told in order.
type observers []observer

func (os observers) received(n int) {
	for _, o := range os {
		o.received(n)
	}
}

func (os observers) ended(a *attempt, err error) {
	for _, o := range os {
		o.ended(a, err)
	}
}

func (os observers) committed(a *attempt, took time.Duration, tries int) {
	for _, o := range os {
		o.committed(a, took, tries)
	}
}

func (os observers) retried(n int) {
	for _, o := range os {
		o.retried(n)
	}
}

func (os observers) conflicted(items []*item) {
	for _, o := range os {
		o.conflicted(items)
	}
}

func (os observers) leaseLost(items []*item) {
	for _, o := range os {
		o.leaseLost(items)
	}
}

func (os observers) passed(task BackgroundTask, n, dead int) {
	for _, o := range os {
		o.passed(task, n, dead)
	}
}

// quiet is an observer that ignores everything; observers embed it and
// implement what they watch.
type quiet struct{}

func (quiet) received(int)                           {}
func (quiet) ended(*attempt, error)                  {}
func (quiet) committed(*attempt, time.Duration, int) {}
func (quiet) retried(int)                            {}
func (quiet) conflicted([]*item)                     {}
func (quiet) leaseLost([]*item)                      {}
func (quiet) passed(BackgroundTask, int, int)        {}

// Observation describes one committed unit of work (see Config.Observe).
type Observation struct {
	// Messages is how many deliveries the unit of work settled.
	Messages int
	// Applied is how many of them ran a transition or a handler.
	Applied int
	// Duration is the time from Begin to the end of the commit.
	Duration time.Duration
	// Conflicts is how many times the unit of work was re-applied first.
	Conflicts int
	// SagaTypes lists the distinct saga types of its messages
	// ("idem.handler" for plain handlers, "" for messages refused before
	// their saga was known).
	SagaTypes []string

	results   []result  // the unit of work's outcomes, for PublishToCommit
	committed time.Time // when its commit ended
}

// PublishToCommit calls yield, in order, with the publish-to-commit latency
// of each message the unit of work applied: the time from its envelope's
// SentAt to the end of the commit, on this process's clock. Messages
// without a SentAt are left out; a SentAt after the commit (the sender's
// clock ahead of this one) counts as 0. It stops when yield returns false.
// It allocates nothing, and may be called only during the Config.Observe
// call that received o: the engine reuses what it reads afterwards.
func (o Observation) PublishToCommit(yield func(time.Duration) bool) {
	for i := range o.results {
		r := &o.results[i]
		sent := r.it.d.Envelope.SentAt
		if r.o.kind != OutcomeApplied || sent.IsZero() {
			continue
		}
		if !yield(max(o.committed.Sub(sent), 0)) {
			return
		}
	}
}

// AdmissionWaits calls yield, in order, with the time each message the
// unit of work settled waited for admission under flow control
// (transport.Delivery.Waited): from the moment it was visible in the
// queue to its admission. Messages received without admission are left
// out. It stops when yield returns false, allocates nothing, and may be
// called only during the Config.Observe call that received o.
func (o Observation) AdmissionWaits(yield func(time.Duration) bool) {
	for i := range o.results {
		d := &o.results[i].it.d
		if d.Admitted && !yield(d.Waited) {
			return
		}
	}
}

// observeFunc is Config.Observe as an observer. now, nil for time.Now,
// dates the commits for Observation.PublishToCommit.
type observeFunc struct {
	quiet
	fn  func(Observation)
	now func() time.Time
}

func (f observeFunc) committed(a *attempt, took time.Duration, tries int) {
	applied := 0
	for _, r := range a.results {
		if r.o.kind == OutcomeApplied {
			applied++
		}
	}
	var types []string
	for _, it := range a.items {
		if !slices.Contains(types, it.typ) {
			types = append(types, it.typ)
		}
	}
	now := time.Now
	if f.now != nil {
		now = f.now
	}
	f.fn(Observation{Messages: len(a.items), Applied: applied, Duration: took, Conflicts: tries - 1, SagaTypes: types,
		results: a.results, committed: now()})
}

// tracerObserver ends the spans of Config.Tracer: each message's span with
// its outcome, and the emissions' send spans, once the attempt's commit
// returned. (Spans start where the work starts: see tracing.)
type tracerObserver struct{ quiet }

func (tracerObserver) ended(a *attempt, err error) {
	for _, s := range a.sends {
		s.End(err)
	}
	a.sends = nil
	for i, s := range a.spans {
		var end MessageEnd
		switch {
		case errors.Is(err, store.ErrConflict):
			end = MessageEnd{Outcome: OutcomeConflict, Err: err}
		case err != nil:
			end = MessageEnd{Outcome: OutcomeFailed, Err: err}
		default:
			o := a.results[i].o
			end = MessageEnd{Outcome: o.kind, From: o.from, To: o.to, Reason: o.reason, Err: o.err}
		}
		s.End(end)
	}
	a.spans = nil
}

package helix

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
)

// SagaType is the saga type of a sequencing batch. Its key is the batch's
// sample ID, which the engine canonicalises (Unicode NFC): the NFC and NFD
// spellings of one ID are one saga, and the journal keeps each message's
// raw spelling (store.JournalEntry.RawKey).
const SagaType = "helix-batch"

// The batch's states, as the audit table names them.
const (
	Pending   = "PENDING"
	Assigned  = "ASSIGNED"
	Running   = "RUNNING"
	Completed = "COMPLETED"
	Failed    = "FAILED"
)

// Submitted asks for a batch to be sequenced. Submitting one sample twice,
// or its NFC and NFD twins, yields one batch.
type Submitted struct {
	SampleID string `json:"sample_id"`
}

// Assign asks for the batch to be assigned to Worker. Request is unique
// per call, so the caller can tell from the saga's data whether it won.
type Assign struct {
	SampleID string `json:"sample_id"`
	Worker   string `json:"worker"`
	Request  string `json:"request"`
}

// Start reports that the assigned worker began the batch.
type Start struct {
	SampleID string `json:"sample_id"`
	Worker   string `json:"worker"`
	Attempt  int    `json:"attempt"`
}

// Complete reports the batch's result.
type Complete struct {
	SampleID string `json:"sample_id"`
	Worker   string `json:"worker"`
	Attempt  int    `json:"attempt"`
	Result   string `json:"result"`
}

// Fail reports that the batch cannot be sequenced.
type Fail struct {
	SampleID string `json:"sample_id"`
	Worker   string `json:"worker"`
	Attempt  int    `json:"attempt"`
	Reason   string `json:"reason"`
}

// LeaseExpired is the reaper: the timer an assignment schedules, which
// releases the batch back to PENDING when its worker did not finish in
// time.
type LeaseExpired struct {
	SampleID string `json:"sample_id"`
	Attempt  int    `json:"attempt"`
}

// MessageType implements saga.Typer.
func (Submitted) MessageType() string { return "helix.submitted" }

// MessageType implements saga.Typer.
func (Assign) MessageType() string { return "helix.assign" }

// MessageType implements saga.Typer.
func (Start) MessageType() string { return "helix.start" }

// MessageType implements saga.Typer.
func (Complete) MessageType() string { return "helix.complete" }

// MessageType implements saga.Typer.
func (Fail) MessageType() string { return "helix.fail" }

// MessageType implements saga.Typer.
func (LeaseExpired) MessageType() string { return "helix.lease-expired" }

// Batch is the saga's state document.
type Batch struct {
	// RawIDs are the spellings the sample ID was submitted with, first
	// one first (forensics: a twin adds its own).
	RawIDs []string `json:"raw_ids"`
	// Worker, Attempt and Request describe the current (or last)
	// assignment; Attempt counts assignments from 1.
	Worker  string `json:"worker,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	Request string `json:"request,omitempty"`
}

// MachineConfig configures NewMachine.
type MachineConfig struct {
	// Lease is how long an assignment (ASSIGNED or RUNNING) may last before
	// the reaper releases it. Default 30s.
	Lease time.Duration
	// FaultAfterAudit, for tests and demonstrations, names a target state:
	// a transition to it runs a failing statement right after its audit
	// insert, in the same transaction, and fails the message permanently.
	// Neither the state change nor the audit row may then land.
	FaultAfterAudit string
	// BeforeWrite, for tests, is called before a transition's rows are
	// written, with the target state; an error fails the message. A test
	// blocks in it to stop a process after it received a message and
	// before it committed.
	BeforeWrite func(ctx context.Context, to string) error
	// Logger receives the saga's own log lines. Nil means slog.Default().
	Logger *slog.Logger
}

// ErrFault is wrapped by the error of a transition FaultAfterAudit broke.
var ErrFault = errors.New("injected fault after the audit insert")

// NewMachine builds the batch saga:
//
//	PENDING ─assign→ ASSIGNED ─start→ RUNNING ─complete→ COMPLETED
//	                     │              ├─fail→ FAILED
//	                     └─lease expiry─┴─→ PENDING
//
// The saga's state is the one active assignment of a batch: an Assign in
// any state but PENDING is ignored, so of concurrent assigners exactly one
// wins. Start, Complete and Fail must name the current worker and attempt,
// and a LeaseExpired the current attempt; stale ones are ignored (a killed
// worker that comes back late changes nothing). Every transition writes its
// audit row (and the assignment table) through the unit of work's own
// transaction, so the row commits with the state change or not at all.
func NewMachine(cfg MachineConfig) *saga.Machine[Batch] {
	if cfg.Lease <= 0 {
		cfg.Lease = 30 * time.Second
	}
	m := saga.New[Batch](SagaType)
	pending, assigned, running := m.State(Pending), m.State(Assigned), m.State(Running)
	completed, failed := m.Final(Completed), m.Final(Failed)

	submitted := saga.NewEvent[Submitted](m, func(e Submitted) string { return e.SampleID })
	assign := saga.NewEvent[Assign](m, func(e Assign) string { return e.SampleID })
	start := saga.NewEvent[Start](m, func(e Start) string { return e.SampleID })
	complete := saga.NewEvent[Complete](m, func(e Complete) string { return e.SampleID })
	fail := saga.NewEvent[Fail](m, func(e Fail) string { return e.SampleID })
	expired := saga.NewEvent[LeaseExpired](m, func(e LeaseExpired) string { return e.SampleID })

	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := writer{fault: cfg.FaultAfterAudit, before: cfg.BeforeWrite, log: cfg.Logger.With("component", "helixqueue.batch")}
	twin := saga.When(submitted).Then(func(c *saga.Context[Batch], e Submitted) error {
		c.Data.addRaw(e.SampleID)
		return nil
	})

	m.Initially(saga.When(submitted).Then(func(c *saga.Context[Batch], e Submitted) error {
		c.Data.addRaw(e.SampleID)
		return w.transition(c, transition{to: Pending, raw: e.SampleID, reason: "submitted"})
	}).TransitionTo(pending))

	m.During(pending, twin,
		saga.When(assign).Then(func(c *saga.Context[Batch], e Assign) error {
			c.Data.Attempt++
			c.Data.Worker, c.Data.Request = e.Worker, e.Request
			c.Schedule(leaseTimer(c.Data.Attempt), cfg.Lease, LeaseExpired{SampleID: c.Key(), Attempt: c.Data.Attempt})
			return w.transition(c, transition{to: Assigned, raw: e.SampleID, reason: "assigned"})
		}).TransitionTo(assigned),
		saga.Ignore(start), saga.Ignore(complete), saga.Ignore(fail), saga.Ignore(expired))

	m.During(assigned, twin, saga.Ignore(assign), saga.Ignore(complete),
		saga.When(start).If(notCurrent[Start], ignore[Start]).Then(func(c *saga.Context[Batch], e Start) error {
			c.Unschedule(leaseTimer(c.Data.Attempt))
			c.Schedule(leaseTimer(c.Data.Attempt), cfg.Lease, LeaseExpired{SampleID: c.Key(), Attempt: c.Data.Attempt})
			return w.transition(c, transition{to: Running, raw: e.SampleID, reason: "started"})
		}).TransitionTo(running),
		failWhen(fail, w).TransitionTo(failed),
		reap(expired, w).TransitionTo(pending))

	m.During(running, twin, saga.Ignore(assign), saga.Ignore(start),
		saga.When(complete).If(notCurrent[Complete], ignore[Complete]).Then(func(c *saga.Context[Batch], e Complete) error {
			c.Unschedule(leaseTimer(c.Data.Attempt))
			return w.transition(c, transition{to: Completed, raw: e.SampleID, reason: "completed", result: &e.Result})
		}).TransitionTo(completed),
		failWhen(fail, w).TransitionTo(failed),
		reap(expired, w).TransitionTo(pending))
	return m
}

// leaseTimer names the reaper timer of one attempt.
func leaseTimer(attempt int) string { return fmt.Sprintf("lease-%d", attempt) }

func (b *Batch) addRaw(raw string) {
	for _, r := range b.RawIDs {
		if r == raw {
			return
		}
	}
	b.RawIDs = append(b.RawIDs, raw)
}

// fenced is a message that names a worker and an attempt.
type fenced interface {
	fence() (worker string, attempt int)
}

func (e Start) fence() (string, int)    { return e.Worker, e.Attempt }
func (e Complete) fence() (string, int) { return e.Worker, e.Attempt }
func (e Fail) fence() (string, int)     { return e.Worker, e.Attempt }

// notCurrent is true for a message from another worker or attempt than the
// batch's current assignment: a late report of a released assignment.
func notCurrent[M fenced](c *saga.Context[Batch], msg M) bool {
	wk, at := msg.fence()
	return wk != c.Data.Worker || at != c.Data.Attempt
}

func ignore[M any](b *saga.Activity[Batch, M]) *saga.Activity[Batch, M] { return b.Ignore() }

func failWhen(ev *saga.Event[Batch, Fail], w writer) *saga.Activity[Batch, Fail] {
	return saga.When(ev).If(notCurrent[Fail], ignore[Fail]).Then(func(c *saga.Context[Batch], e Fail) error {
		c.Unschedule(leaseTimer(c.Data.Attempt))
		return w.transition(c, transition{to: Failed, raw: e.SampleID, reason: "failed: " + e.Reason})
	})
}

// reap releases the current assignment when its lease expired; the timer
// of an earlier attempt is ignored.
func reap(ev *saga.Event[Batch, LeaseExpired], w writer) *saga.Activity[Batch, LeaseExpired] {
	stale := func(c *saga.Context[Batch], e LeaseExpired) bool { return e.Attempt != c.Data.Attempt }
	return saga.When(ev).If(stale, ignore[LeaseExpired]).Then(func(c *saga.Context[Batch], e LeaseExpired) error {
		return w.transition(c, transition{to: Pending, raw: e.SampleID, reason: ReasonLeaseExpired})
	})
}

// ReasonLeaseExpired is the audit reason of a release by the reaper.
const ReasonLeaseExpired = "lease-expired"

// permanent marks err as not worth retrying.
func permanent(err error) error { return idem.Permanent(err) }

package idem

import (
	"context"
	"errors"
	"fmt"
)

// verdict is what a start-up check decided.
type verdict int

// The verdicts of a start-up check.
const (
	verdictOK     verdict = iota // the engine may start
	verdictWarn                  // the engine starts; the message is logged
	verdictRefuse                // Start fails with the check's error
)

// StartCheckError is the error Start returns when one of its start-up
// checks refuses: Check names the check, Err says what to change. Its
// message is Err's, followed by the check's name; errors.Is and errors.As
// see through it to Err.
type StartCheckError struct {
	Check string
	Err   error
}

// Error returns Err's message and the name of the check.
func (e *StartCheckError) Error() string {
	return fmt.Sprintf("%v (start-up check %q)", e.Err, e.Check)
}

// Unwrap returns Err.
func (e *StartCheckError) Unwrap() error { return e.Err }

// checkResult is what one start-up check found: its verdict, and a
// message saying what to change (empty when ok). A refusal carries the
// error Start returns, whose text is the message; make one with refused.
type checkResult struct {
	verdict verdict
	message string
	err     error
}

func passed() checkResult { return checkResult{verdict: verdictOK} }

func warned(msg string) checkResult { return checkResult{verdict: verdictWarn, message: msg} }

// refused is a refusal with err, or passed when err is nil.
func refused(err error) checkResult {
	if err == nil {
		return passed()
	}
	return checkResult{verdict: verdictRefuse, message: err.Error(), err: err}
}

// startCheck is one part of Start's start-up checks: a name, and the check
// itself, which reads and fills the startup it shares with the checks
// after it.
type startCheck struct {
	name string
	run  func(ctx context.Context, su *startup) checkResult
}

// startup is what the start-up checks read, and the results a later check
// or Start itself needs: whether consumers may claim, the admission of
// declared limits (nil: none), and the fingerprints of the definitions
// recorded, by saga type (nil: none).
type startup struct {
	*base
	reg       *registry
	plan      *planner
	replicaID string

	claim       bool
	adm         *admission
	definitions map[string]string
}

// startChecks are Start's start-up checks, in the order they run; each
// later one may rely on what the earlier ones put in the startup. A new
// check is one entry here.
func startChecks() []startCheck {
	return []startCheck{
		{"registry", checkRegistry},
		{"pool", checkPoolSize},
		{"unit of work", checkUnitOfWork},
		{"limits", checkLimits},
		{"deploy", checkDeploy},
		{"schedules", checkSchedules},
		{"definitions", checkDefinitions},
	}
}

// runStartChecks runs checks in order on su: a warning is logged with the
// check's name, and the first refusal stops the run with a
// *StartCheckError naming its check.
func runStartChecks(ctx context.Context, checks []startCheck, su *startup) error {
	for _, c := range checks {
		r := c.run(ctx, su)
		switch r.verdict {
		case verdictWarn:
			su.log.WarnContext(ctx, "start-up check warns", "check", c.name, "message", r.message)
		case verdictRefuse:
			return &StartCheckError{Check: c.name, Err: r.err}
		}
	}
	return nil
}

// checkRegistry refuses an engine with nothing to consume or schedule.
func checkRegistry(_ context.Context, su *startup) checkResult {
	if su.reg.empty() {
		return refused(errors.New("idem: start: nothing registered: call Register or Handle first"))
	}
	return passed()
}

// checkPoolSize refuses a store pool too small for the engine (checkPool).
func checkPoolSize(_ context.Context, su *startup) checkResult {
	return refused(checkPool(su.caps.poolSize, su.cfg, su.caps.queue))
}

// checkUnitOfWork probes the store's units of work (probeUnitOfWork) and
// records whether consumers may claim.
func checkUnitOfWork(ctx context.Context, su *startup) checkResult {
	claim, err := probeUnitOfWork(ctx, su.base, su.reg, su.plan)
	su.claim = claim
	return refused(err)
}

// checkLimits checks the declared limits and reads their runtime values,
// keeping the admission; consumers then take messages through it, never
// by a claim inside a unit of work (which would pass it by).
func checkLimits(ctx context.Context, su *startup) checkResult {
	adm, err := newAdmission(su.base, su.reg)
	if err != nil || adm == nil {
		return refused(err)
	}
	su.adm, su.claim = adm, false
	if err := adm.refresh(ctx); err != nil {
		return refused(fmt.Errorf("idem: start: read the limits' runtime values: %w", err))
	}
	return passed()
}

// checkSchedules saves the registered schedules (saveSchedules).
func checkSchedules(ctx context.Context, su *startup) checkResult {
	return refused(saveSchedules(ctx, su.base, su.reg))
}

// probeUnitOfWork learns what the store's units of work can do, on the
// store's own queue: settle deliveries (required) and claim them.
func probeUnitOfWork(ctx context.Context, b *base, reg *registry, plan *planner) (claim bool, err error) {
	if !b.caps.queue {
		return false, nil
	}
	// The queue path settles deliveries inside the unit of work; a store
	// whose units of work cannot do that would leave the outbox unsent.
	uow, err := b.store.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("idem: start: %w", err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	if _, ok := queueUnit(uow); !ok {
		return false, fmt.Errorf("idem: start: store %T is a store.Queue but its units of work are not store.QueueUnitOfWork", b.store)
	}
	return claimsInUnit(b, reg, plan, uow), nil
}

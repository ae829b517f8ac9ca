package store

import (
	"errors"
	"fmt"
	"time"
)

// CounterSweepParams are the inputs of Limiter.SweepCounters.
type CounterSweepParams struct {
	// Idle is how long no admission may have decided on a counter before
	// it is deleted, by the store's clock; 0 or more.
	Idle time.Duration
	// Limit bounds the counters one call reads and the expired holds it
	// deletes; it must be positive.
	Limit int
	// After, when set, starts the read just after this counter (the
	// previous call's CounterSweep.Next); nil: at the first.
	After *LimitKey
}

// Validate returns an error naming what is wrong with p: a nil p, a
// negative Idle or a Limit below 1.
func (p *CounterSweepParams) Validate() error {
	switch {
	case p == nil:
		return errors.New("counter sweep: nil parameters")
	case p.Idle < 0:
		return fmt.Errorf("counter sweep: Idle is %v: give 0 or more", p.Idle)
	case p.Limit < 1:
		return fmt.Errorf("counter sweep: Limit is %d: give 1 or more", p.Limit)
	}
	return nil
}

// CounterSweep is what one Limiter.SweepCounters call did.
type CounterSweep struct {
	// Counters is how many counters it deleted.
	Counters int `json:"counters"`
	// Holds is how many expired holds it deleted: as many as
	// CounterSweepParams.Limit when more may be left.
	Holds int `json:"holds"`
	// Next is the last counter it read when it read
	// CounterSweepParams.Limit of them: pass it as After to read on. Nil
	// when it read the last one.
	Next *LimitKey `json:"next,omitempty"`
}

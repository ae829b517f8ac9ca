// Package countersaga is the counter saga that the engine tests
// (internal/enginetest) and the torture harness (cmd/idem/internal/torture) run: its
// increments publish an event and its first increment schedules a timer,
// so that one workload exercises the inbox, the outbox and the timers.
//
// It imports no test support (package testing), so that the idem binary,
// which runs it under idem torture, does not link it.
package countersaga

import (
	"time"

	"github.com/idemhq/idem/saga"
)

// Counter is the saga's state document.
type Counter struct {
	Total int `json:"total"`
}

// Inc adds N to the saga Key.
type Inc struct {
	Key string `json:"key"`
	N   int    `json:"n"`
}

// Added is published by every increment.
type Added struct {
	Key   string `json:"key"`
	Total int    `json:"total"`
}

// Tick is the timer the first increment schedules; it adds 1000.
type Tick struct {
	Key string `json:"key"`
}

// SagaType is the counter saga's type.
const SagaType = "counter"

// Machine builds the counter saga: Inc starts it in state Open (adding N,
// publishing Added and scheduling Tick after a millisecond), later Incs
// add and publish, and Tick adds 1000.
func Machine() *saga.Machine[Counter] {
	m := saga.New[Counter](SagaType)
	open := m.State("Open")
	inc := saga.NewEvent[Inc](m, func(e Inc) string { return e.Key })
	tick := saga.NewEvent[Tick](m, func(e Tick) string { return e.Key })
	apply := func(c *saga.Context[Counter], e Inc) error {
		c.Data.Total += e.N
		c.Publish(Added{Key: e.Key, Total: c.Data.Total})
		return nil
	}
	m.Initially(saga.When(inc).Then(apply).Then(func(c *saga.Context[Counter], e Inc) error {
		c.Schedule("tick", time.Millisecond, Tick{Key: e.Key})
		return nil
	}).TransitionTo(open))
	m.During(open, saga.When(inc).Then(apply), saga.When(tick).Then(func(c *saga.Context[Counter], _ Tick) error {
		c.Data.Total += 1000
		return nil
	}))
	return m
}

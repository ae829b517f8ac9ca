package idem_test

import (
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
)

// FireSchedule fires the schedule's next tick now under the tick's own ID
// and moves the schedule past it, so the poller never fires that tick
// again; it fires a paused schedule without resuming it, and names a
// missing one.
func TestFireScheduleFiresTheNextTickOnce(t *testing.T) {
	r := newSchedRig(t, 10, func(e *idem.Engine) error { return e.Every("hourly", time.Hour, enginetest.Beat{Note: "fire"}) })
	tick := r.get(t, "hourly").NextDue
	fired, err := r.e.FireSchedule(t.Context(), "hourly", tick)
	if err != nil {
		t.Fatalf("FireSchedule: %v", err)
	}
	if !fired.Tick.Equal(tick) || fired.MessageID != idem.TickID("hourly", tick) || !fired.NextDue.Equal(tick.Add(time.Hour)) {
		t.Errorf("FireSchedule: %+v; want the tick at %s with its TickID, next due an hour later", fired, tick)
	}
	if s := r.get(t, "hourly"); !s.NextDue.Equal(tick.Add(time.Hour)) || !s.LastTick.Equal(tick) {
		t.Errorf("after FireSchedule: next due %s, last tick %s; want %s and %s", s.NextDue, s.LastTick, tick.Add(time.Hour), tick)
	}
	r.waitHandled(t, fired.MessageID)
	// At the tick's own time, the poller has nothing to fire: it was fired.
	if n := r.run(t, tick.Sub(r.t0)); n != 0 {
		t.Errorf("the poller at the fired tick's time fired %d; want 0", n)
	}
	if n := r.run(t, tick.Sub(r.t0)+time.Hour); n != 1 {
		t.Errorf("the poller at the next tick fired %d; want 1", n)
	}
	r.waitHandled(t, idem.TickID("hourly", tick.Add(time.Hour)))
	if n := r.count(fired.MessageID); n != 1 {
		t.Errorf("the fired tick was handled %d times; want once", n)
	}

	if err := r.st.PauseSchedule(t.Context(), "hourly", true, r.clk.Now()); err != nil {
		t.Fatal(err)
	}
	next := r.get(t, "hourly").NextDue
	// A tick other than the next one (the one fired first, confirmed
	// twice) is not fired.
	if _, err := r.e.FireSchedule(t.Context(), "hourly", tick); !errors.Is(err, store.ErrConflict) {
		t.Errorf("FireSchedule of a tick fired already: %v; want store.ErrConflict", err)
	}
	if fired, err := r.e.FireSchedule(t.Context(), "hourly", time.Time{}); err != nil || !fired.Tick.Equal(next) {
		t.Errorf("FireSchedule of a paused schedule: %+v, %v; want its next tick %s", fired, err, next)
	}
	if s := r.get(t, "hourly"); !s.Paused {
		t.Error("FireSchedule resumed a paused schedule")
	}
	if _, err := r.e.FireSchedule(t.Context(), "absent", time.Time{}); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("FireSchedule of a missing schedule: %v; want store.ErrNotFound", err)
	}
}

// count returns how many times the tick message id was handled.
func (r *schedRig) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.got[id]
}

// waitHandled waits for the tick message id to be handled.
func (r *schedRig) waitHandled(t *testing.T, id string) {
	t.Helper()
	enginetest.Eventually(t, func() string {
		if r.count(id) == 0 {
			return "tick " + id + " not handled"
		}
		return ""
	})
}

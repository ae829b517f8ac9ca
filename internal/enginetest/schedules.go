package enginetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Beat is the message the schedule tests publish.
type Beat struct {
	Note string `json:"note"`
}

// FakeClock is a clock a test moves by hand.
type FakeClock struct{ ns atomic.Int64 }

// Set moves the clock to t.
func (c *FakeClock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time { return time.Unix(0, c.ns.Load()).UTC() }

// tickLog counts the scheduled messages a handler received, by ID.
type tickLog struct {
	mu    sync.Mutex
	byID  map[string]int
	ticks map[string]string // ID → schedule/tick
}

func (l *tickLog) handle(_ context.Context, env idem.Envelope) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.byID[env.ID]++
	l.ticks[env.ID] = env.Headers[idem.HeaderSchedule] + "@" + env.Headers[idem.HeaderScheduleTick]
	return nil
}

func (l *tickLog) snapshot() map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make(map[string]int, len(l.byID))
	for k, v := range l.byID {
		out[k] = v
	}
	return out
}

// SchedulesFireOnce drives two engines on st (with tr as their transport:
// st itself when it is its own queue) with a fake clock, calling
// RunSchedules by hand (the schedules tick every 200 hours, so that a
// TimerInterval of an hour keeps the engines' own pollers out): each tick
// is published once although both engines poll, its ID is
// idem.TickID(name, tick), missed ticks follow each schedule's policy, a
// paused schedule stays silent, and registering again at start-up keeps
// the schedule's state.
func SchedulesFireOnce(t *testing.T, st store.Store, tr transport.Transport) {
	t.Helper()
	ctx := t.Context()
	// A multiple of 200h since the Unix epoch (in August 2015): ticks fall
	// on t0 + 200h·k.
	t0 := time.Unix(0, 0).UTC().Add(2000 * 200 * time.Hour)
	clk := &FakeClock{}
	clk.Set(t0)
	log := &tickLog{byID: map[string]int{}, ticks: map[string]string{}}
	newEngine := func() *idem.Engine {
		e, err := idem.NewEngine(st, tr, &idem.Config{Clock: clk.Now, TimerInterval: time.Hour, RelayInterval: 10 * time.Millisecond, RelayAge: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if err := e.Handle(saga.MessageType(Beat{}), log.handle); err != nil {
			t.Fatal(err)
		}
		if err := e.Every("often", 200*time.Hour, Beat{Note: "often"}); err != nil {
			t.Fatal(err)
		}
		if err := e.Every("strict", 200*time.Hour, Beat{Note: "strict"}, idem.SkipMissed(50*time.Hour)); err != nil {
			t.Fatal(err)
		}
		if err := e.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = e.Stop(context.Background()) })
		return e
	}
	a, b := newEngine(), newEngine()
	want := map[string]int{}
	// run polls both engines at once, as two replicas would.
	run := func(at time.Time, fired ...string) {
		t.Helper()
		clk.Set(at)
		var n atomic.Int64
		var wg sync.WaitGroup
		for _, e := range []*idem.Engine{a, b, a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				k, err := e.RunSchedules(ctx)
				if err != nil {
					t.Errorf("run schedules at %s: %v", at, err)
				}
				n.Add(int64(k))
			}()
		}
		wg.Wait()
		if int(n.Load()) != len(fired) {
			t.Errorf("at %s: %d messages published by 4 concurrent polls, want %d (%v)", at.Sub(t0), n.Load(), len(fired), fired)
		}
		for _, f := range fired {
			name, off, _ := cut(f)
			want[idem.TickID(name, t0.Add(off))]++
		}
		WaitFor(t, 30*time.Second, "scheduled messages handled", func() (bool, error) {
			return len(log.snapshot()) == len(want), nil
		})
	}
	run(t0)                                                 // nothing due yet
	run(t0.Add(200*time.Hour), "often@200h", "strict@200h") // on time
	run(t0.Add(210 * time.Hour))                            // already fired
	// Five ticks missed: "often" catches up with the latest (1200h),
	// "strict" finds it 100h late, past its 50h grace, and skips it.
	run(t0.Add(1300*time.Hour), "often@1200h")
	run(t0.Add(1420*time.Hour), "often@1400h", "strict@1400h")

	sc := st.(store.Scheduler)
	if err := sc.PauseSchedule(ctx, "often", true, clk.Now()); err != nil {
		t.Fatal(err)
	}
	run(t0.Add(1610*time.Hour), "strict@1600h")
	// A replica restarting registers both again: "often" stays paused, and
	// "strict" keeps its next tick.
	c := newEngine()
	_ = c
	got, err := sc.GetSchedule(ctx, "often")
	if err != nil || !got.Paused || !got.LastTick.Equal(t0.Add(1400*time.Hour)) {
		t.Fatalf("often after re-registration: %+v (%v), want paused, last tick 1400h", got, err)
	}
	if got, err := sc.GetSchedule(ctx, "strict"); err != nil || !got.NextDue.Equal(t0.Add(1800*time.Hour)) {
		t.Fatalf("strict after re-registration: %+v (%v), want next due 1800h", got, err)
	}
	// Resumed, "often" catches up once for the ticks it missed paused.
	if err := sc.PauseSchedule(ctx, "often", false, clk.Now()); err != nil {
		t.Fatal(err)
	}
	run(t0.Add(1810*time.Hour), "often@1800h", "strict@1800h")

	for id, n := range log.snapshot() {
		if n != 1 || want[id] != 1 {
			t.Errorf("message %s (%s) handled %d times, want %d", id, log.ticks[id], n, want[id])
		}
	}
}

// cut splits "name@200ms".
func cut(s string) (string, time.Duration, bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '@' {
			d, err := time.ParseDuration(s[i+1:])
			return s[:i], d, err == nil
		}
	}
	return s, 0, false
}

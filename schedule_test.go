package idem_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// Schedules on memstore with a broker-like transport: ticks go through the
// outbox committed with the advance, then to the transport.
func TestSchedulesFireOnceThroughOutbox(t *testing.T) {
	tr := memtransport.New(nil)
	t.Cleanup(func() { _ = tr.Close() })
	enginetest.SchedulesFireOnce(t, memstore.New(nil), tr)
}

func TestScheduleRegistrationRefusesBadInput(t *testing.T) {
	e, err := idem.NewEngine(memstore.New(nil), memtransport.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"empty name":     e.Every("", time.Second, enginetest.Beat{}),
		"NUL in name":    e.Every("a\x00b", time.Second, enginetest.Beat{}),
		"invalid UTF-8":  e.Every("a\xffb", time.Second, enginetest.Beat{}),
		"long name":      e.Every(strings.Repeat("n", 201), time.Second, enginetest.Beat{}),
		"tiny interval":  e.Every("tiny", time.Microsecond, enginetest.Beat{}),
		"bad cron":       e.Cron("bad", "61 * * * *", enginetest.Beat{}),
		"script in cron": e.Cron("script", "<script>alert(1)</script>", enginetest.Beat{}),
		"NUL in cron":    e.Cron("nul", "* * * * *\x00", enginetest.Beat{}),
		"30 February":    e.Cron("feb30", "0 0 30 2 *", enginetest.Beat{}),
		"unencodable":    e.Every("chan", time.Second, make(chan int)),
	} {
		if err == nil {
			t.Errorf("%s: registered, want an error", name)
		}
	}
	if err := e.Cron("daily", "30 2 * * *", enginetest.Beat{}); err != nil {
		t.Fatalf("valid cron: %v", err)
	}
	if err := e.Cron("daily", "@hourly", enginetest.Beat{}); err == nil {
		t.Error("second schedule named daily: registered, want an error")
	}
}

func TestTickIDIsDeterministic(t *testing.T) {
	at := time.Date(2026, 1, 1, 2, 30, 0, 0, time.UTC)
	if idem.TickID("daily", at) != idem.TickID("daily", at.In(time.FixedZone("x", 3600))) {
		t.Error("the same instant in another zone gives another ID")
	}
	if idem.TickID("daily", at) == idem.TickID("daily", at.Add(time.Microsecond)) || idem.TickID("daily", at) == idem.TickID("other", at) {
		t.Error("distinct ticks share an ID")
	}
}

// logCounter is a slog handler that keeps the records it receives.
type logCounter struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logCounter) Enabled(context.Context, slog.Level) bool { return true }
func (h *logCounter) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *logCounter) WithGroup(string) slog.Handler            { return h }
func (h *logCounter) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	return nil
}

// count returns how many records at level or above name schedule.
func (h *logCounter) count(level slog.Level, schedule string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		r.Attrs(func(a slog.Attr) bool {
			if r.Level >= level && a.Key == "schedule" && a.Value.String() == schedule {
				n++
			}
			return true
		})
	}
	return n
}

// schedRig is one engine on a memstore with a fake clock, polled by hand
// (its TimerInterval is an hour: the poller does not run during a test),
// and a handler that records the tick IDs it receives.
type schedRig struct {
	st   *memstore.Store
	clk  *enginetest.FakeClock
	logs *logCounter
	e    *idem.Engine
	t0   time.Time
	mu   sync.Mutex
	got  map[string]int // tick message ID → deliveries
}

func newSchedRig(t *testing.T, batch int, register func(e *idem.Engine) error) *schedRig {
	t.Helper()
	r := &schedRig{st: memstore.New(nil), clk: &enginetest.FakeClock{}, logs: &logCounter{}, got: map[string]int{},
		t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r.clk.Set(r.t0)
	tr := memtransport.New(nil)
	t.Cleanup(func() { _ = tr.Close() })
	e, err := idem.NewEngine(r.st, tr, &idem.Config{Clock: r.clk.Now, TimerInterval: time.Hour, BatchSize: batch, Logger: slog.New(r.logs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Handle(saga.MessageType(enginetest.Beat{}), func(_ context.Context, env idem.Envelope) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got[env.ID]++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := register(e); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	r.e = e
	return r
}

// saveRaw writes a schedule row as another build or an operator could
// have: due an hour before t0.
func (r *schedRig) saveRaw(t *testing.T, name, spec, missed string, env idem.Envelope) {
	t.Helper()
	due := r.t0.Add(-time.Hour)
	if err := r.st.SaveSchedule(t.Context(), &store.Schedule{Name: name, Spec: spec, Missed: missed, Grace: time.Minute,
		Envelope: env, NextDue: due, UpdatedAt: due}); err != nil {
		t.Fatal(err)
	}
}

// run polls at t0+at with a guard deadline (a poller that loops forever
// fails the test instead of hanging it).
func (r *schedRig) run(t *testing.T, at time.Duration) int {
	t.Helper()
	r.clk.Set(r.t0.Add(at))
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	n, err := r.e.RunSchedules(ctx)
	if err != nil {
		t.Fatalf("run schedules at t0+%s: %v (fired %d)", at, err, n)
	}
	return n
}

func (r *schedRig) get(t *testing.T, name string) *store.Schedule {
	t.Helper()
	s, err := r.st.GetSchedule(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func beatTemplate(t *testing.T, note string) idem.Envelope {
	t.Helper()
	env, err := idem.NewEnvelope("x", enginetest.Beat{Note: note})
	if err != nil {
		t.Fatal(err)
	}
	env.ID = ""
	return env
}

// A row the engine cannot plan (a spec it cannot parse, a missed-tick
// policy it does not know, a message that does not validate) is left as
// it is for a replica that can, logged once, and does not hold up the
// schedules behind it, even when it fills the whole batch.
func TestScheduleUnplannableRowsAreSkippedAndLoggedOnce(t *testing.T) {
	for _, batch := range []int{1, 100} {
		t.Run(fmt.Sprintf("batch %d", batch), func(t *testing.T) {
			r := newSchedRig(t, batch, func(e *idem.Engine) error {
				return e.Every("good", 2*time.Hour, enginetest.Beat{Note: "good"})
			})
			bad := beatTemplate(t, "bad")
			r.saveRaw(t, "bad-spec", "every other tuesday", store.MissedFireOnce, bad)
			r.saveRaw(t, "bad-policy", "@every 2h0m0s", "fire_all", bad)
			noType := bad.Clone()
			noType.Type = ""
			r.saveRaw(t, "bad-message", "@every 2h0m0s", store.MissedFireOnce, noType)
			before := map[string]*store.Schedule{}
			for _, n := range []string{"bad-spec", "bad-policy", "bad-message"} {
				before[n] = r.get(t, n)
			}
			if n := r.run(t, 2*time.Hour); n != 1 {
				t.Errorf("first poll fired %d ticks, want 1 (good@2h)", n)
			}
			if n := r.run(t, 4*time.Hour); n != 1 {
				t.Errorf("second poll fired %d ticks, want 1 (good@4h)", n)
			}
			if got := r.get(t, "good"); !got.LastTick.Equal(r.t0.Add(4 * time.Hour)) {
				t.Errorf("good: last tick %s, want t0+4h", got.LastTick)
			}
			for name, b := range before {
				got := r.get(t, name)
				if !got.NextDue.Equal(b.NextDue) || got.Paused || !got.LastTick.IsZero() {
					t.Errorf("%s: changed to %+v, want it left as it was", name, got)
				}
				if n := r.logs.count(slog.LevelError, name); n != 1 {
					t.Errorf("%s: logged %d times at error level over two polls, want once", name, n)
				}
			}
		})
	}
}

// A schedule saved by another engine (another build, or one that no
// longer registers it) fires from its stored row: the message is the
// stored template, so it needs nothing of the local registry.
func TestSchedulePollerFiresStoredScheduleItDidNotRegister(t *testing.T) {
	r := newSchedRig(t, 100, func(e *idem.Engine) error {
		return e.Every("mine", 2*time.Hour, enginetest.Beat{Note: "mine"})
	})
	r.saveRaw(t, "theirs", "@every 2h0m0s", store.MissedFireOnce, beatTemplate(t, "theirs"))
	if n := r.run(t, 2*time.Hour); n != 2 {
		t.Fatalf("fired %d ticks, want 2 (mine and theirs at 2h)", n)
	}
	id := idem.TickID("theirs", r.t0.Add(2*time.Hour))
	enginetest.WaitFor(t, 30*time.Second, "the tick of theirs handled", func() (bool, error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		return r.got[id] == 1, nil
	})
}

// Each pass fires what is due, batch after batch, and returns how many
// ticks it fired: a SkipMissed schedule that skips its tick advances
// without a message and is not counted.
func TestRunSchedulesCountsFiredTicks(t *testing.T) {
	r := newSchedRig(t, 1, func(e *idem.Engine) error {
		for i := range 3 {
			if err := e.Every(fmt.Sprintf("s%d", i), 2*time.Hour, enginetest.Beat{}); err != nil {
				return err
			}
		}
		return e.Every("late", 2*time.Hour, enginetest.Beat{}, idem.SkipMissed(time.Hour))
	})
	if n := r.run(t, 2*time.Hour+90*time.Minute); n != 3 {
		t.Errorf("fired %d, want 3 (s0, s1, s2 at 2h; late skipped: 90m past its tick, grace 1h)", n)
	}
	for _, name := range []string{"s0", "s1", "s2", "late"} {
		if got := r.get(t, name); !got.NextDue.Equal(r.t0.Add(4 * time.Hour)) {
			t.Errorf("%s: next due %s, want t0+4h", name, got.NextDue)
		}
	}
}

// An interval, or a SkipMissed grace, shorter than the poll interval
// (Config.TimerInterval) is refused: each poll would fire only the latest
// of the ticks due since the previous one, or skip most of them.
func TestScheduleShorterThanPollIntervalRefused(t *testing.T) {
	e, err := idem.NewEngine(memstore.New(nil), memtransport.New(nil), &idem.Config{TimerInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"every 500ms":       e.Every("fast", 500*time.Millisecond, enginetest.Beat{}),
		"cron @every 999ms": e.Cron("fast-cron", "@every 999ms", enginetest.Beat{}),
		"grace 100ms":       e.Every("strict", time.Minute, enginetest.Beat{}, idem.SkipMissed(100*time.Millisecond)),
	} {
		if err == nil {
			t.Errorf("%s with TimerInterval 1s: registered, want an error", name)
		} else if !strings.Contains(err.Error(), "TimerInterval") {
			t.Errorf("%s: error %q does not name Config.TimerInterval", name, err)
		}
	}
	if err := e.Every("at-poll", time.Second, enginetest.Beat{}); err != nil {
		t.Errorf("interval equal to TimerInterval: %v", err)
	}
	if err := e.Every("grace-at-poll", time.Minute, enginetest.Beat{}, idem.SkipMissed(time.Second)); err != nil {
		t.Errorf("grace equal to TimerInterval: %v", err)
	}
}

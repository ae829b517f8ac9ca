package torture

import (
	"context"
	"database/sql"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// schedRun is a finished run of the ledger saga and two hourly schedules
// on a SQLite store with the schedule audit, driven by a fake clock.
type schedRun struct {
	t0   time.Time
	st   *sqlitestore.Store
	db   *sql.DB // read-only, as the driver's
	rw   *sql.DB // to break the run's outcome
	hist []Record
}

// tick returns the message ID of schedule name's tick at t0+h hours.
func (r *schedRun) tick(name string, h time.Duration) string {
	return idem.TickID(name, r.t0.Add(h*time.Hour))
}

func (r *schedRun) exec(t *testing.T, q string, args ...any) {
	t.Helper()
	if _, err := r.rw.ExecContext(t.Context(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// deleteApplied removes the journal rows of message id (the journal is
// append-only: the guard the sweeper uses lets the delete through).
func (r *schedRun) deleteApplied(t *testing.T, id string) {
	t.Helper()
	r.exec(t, `UPDATE idem_journal_guard SET sweeping = 1`)
	r.exec(t, `DELETE FROM idem_journal WHERE message_id = ?`, id)
	r.exec(t, `UPDATE idem_journal_guard SET sweeping = 0`)
}

// fireSchedules creates the schedules at t0+10m ("every" fires once,
// "skip" skips ticks found more than 10m late) and polls by hand at t0 +
// 1h, 2h, 5h30m and 6h (the engine's own poller, every 10 real minutes,
// stays out): "every" fires 1h, 2h, 5h (3h and 4h coalesced) and 6h;
// "skip" fires 1h and 2h, skips 3h to 5h (5h is 30m late), fires 6h.
func fireSchedules(t *testing.T) *schedRun {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	path := filepath.Join(t.TempDir(), "idem.db")
	st, err := sqlitestore.Open(ctx, path, &sqlitestore.Config{Lease: 5 * time.Second, PollInterval: 10 * time.Millisecond, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := installScheduleAudit(ctx, path, ""); err != nil {
		t.Fatal(err)
	}
	r := &schedRun{t0: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), st: st}
	scheds := []schedule{
		{name: "every", every: time.Hour, missed: store.MissedFireOnce},
		{name: "skip", every: time.Hour, missed: store.MissedSkip, grace: 10 * time.Minute},
	}
	for _, rec := range scheduleRecords(scheds) {
		r.hist = append(r.hist, *rec)
	}
	clk := &enginetest.FakeClock{}
	clk.Set(r.t0.Add(10 * time.Minute))
	e, err := idem.NewEngine(st, st, &idem.Config{Clock: clk.Now, TimerInterval: 10 * time.Minute, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	if err := registerSchedules(e, scheds); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Duration{time.Hour, 2 * time.Hour, 5*time.Hour + 30*time.Minute, 6 * time.Hour} {
		clk.Set(r.t0.Add(at))
		if _, err := e.RunSchedules(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if r.db, err = openDB(path, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.db.Close() })
	enginetest.WaitFor(t, 30*time.Second, "the ticks applied", func() (bool, error) {
		n, err := inFlight(ctx, r.db, true)
		return n == 0, err
	})
	if err := e.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if r.rw, err = sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(10000)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.rw.Close() })
	return r
}

func TestCheckSchedulesPassesARun(t *testing.T) {
	r := fireSchedules(t)
	vs, counts, err := check(t.Context(), r.hist, r.st, r.db)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		t.Errorf("violation: %s", v)
	}
	if want := (TickCounts{Fired: 7, Coalesced: 2, Skipped: 3}); counts != want {
		t.Errorf("tick counts %+v, want %+v", counts, want)
	}
}

// The checker fails a run whose schedule ticks were lost, doubled or
// fired against the schedule's policy, naming the tick.
func TestCheckSchedulesCatchesBrokenTicks(t *testing.T) {
	for _, tc := range []struct {
		name   string
		breaks func(t *testing.T, r *schedRun) string // returns the message the violation must name
		detail string
	}{
		{"tick lost", func(t *testing.T, r *schedRun) string {
			r.deleteApplied(t, r.tick("every", 2))
			return r.tick("every", 2)
		}, "never applied: lost"},
		{"last tick lost", func(t *testing.T, r *schedRun) string {
			r.deleteApplied(t, r.tick("skip", 6))
			return r.tick("skip", 6)
		}, "never applied: lost"},
		{"tick doubled", func(t *testing.T, r *schedRun) string {
			r.exec(t, `INSERT INTO idem_journal (saga_type, key, raw_key, message_id, event_type, from_state, to_state, version, at)
SELECT saga_type, key, raw_key, message_id, event_type, from_state, to_state, version + 10, at FROM idem_journal WHERE message_id = ?`, r.tick("every", 5))
			return r.tick("every", 5)
		}, "applied 2 times: doubled"},
		{"coalesced tick applied", func(t *testing.T, r *schedRun) string {
			r.exec(t, `INSERT INTO idem_journal (saga_type, key, raw_key, message_id, event_type, from_state, to_state, version, at)
VALUES (?, 'every', 'every', ?, 'torture.ScheduleTick', 'Counting', 'Counting', 99, 0)`, ledgerSagaType, r.tick("every", 3))
			return r.tick("every", 3)
		}, "applied that no recorded advance fired"},
		{"fire-once advance fired nothing", func(t *testing.T, r *schedRun) string {
			r.exec(t, `UPDATE `+auditTable+` SET fired = NULL WHERE name = 'every' AND fired = ?`, r.t0.Add(5*time.Hour).UnixMicro())
			return ""
		}, "fired nothing: a fire_once schedule lost 3 ticks"},
		{"tick claimed twice", func(t *testing.T, r *schedRun) string {
			h := func(n time.Duration) int64 { return r.t0.Add(n * time.Hour).UnixMicro() }
			r.exec(t, `INSERT INTO `+auditTable+` (name, from_due, to_due, fired) VALUES ('every', ?, ?, ?)`, h(1), h(2), h(1))
			return r.tick("every", 1)
		}, "claimed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := fireSchedules(t)
			msg := tc.breaks(t, r)
			vs, err := Check(t.Context(), r.hist, r.st, r.db)
			if err != nil {
				t.Fatal(err)
			}
			found := false
			for _, v := range vs {
				t.Logf("violation: %s", v)
				if v.Invariant == InvSchedule && strings.Contains(v.Detail, tc.detail) && (msg == "" || slices.Contains(v.Messages, msg)) {
					found = true
				}
			}
			if !found {
				t.Errorf("no %s violation %q naming message %q among %d violations", InvSchedule, tc.detail, msg, len(vs))
			}
		})
	}
}

package torture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"syscall"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/searchimport"
	"github.com/idemhq/idem/internal/countersaga"
	"github.com/idemhq/idem/saga"
)

// The roll mode (Options.Roll, idem torture --roll): a rolling deploy of
// the workers from definition A (today's machines) to definition B while
// the workload flows and workers are killed. From a third of the run the
// driver replaces the workers one at a time (SIGTERM, then a restart that
// runs B), the last at two thirds, so A and B serve the same queue side
// by side for a third of the run. A worker killed
// meanwhile restarts on its own definition, as a crashed replica of
// either build would.
//
// B is a change a real deploy makes and that A's replicas cannot serve:
//   - the counter gains a state on its main path: an increment creates
//     the saga in Opening (new), and its Tick moves it to Open; and its
//     document goes to schema version 2 (a new field, ticked, which the
//     upgrade step derives from a version 1 document);
//   - the search's document goes to schema version 2 as well (its format
//     is unchanged; the upgrade step refuses a document that names no
//     search).
//
// B reaches the same end results as A (Open with the same total, the same
// emissions under the same IDs, the same final searches), so the checker
// is unchanged. What the roll adds: an A worker that meets a saga B wrote
// refuses it (saga.ErrUnknownState) and gives its message back; the
// workers count these give-backs from the engine's log (giveBackCounter),
// and the run fails as "not a rolling deploy" when there were
// none (a roll shorter than the workers' start, say). No dead letter may carry a reason the deploy caused
// (InvDeployDeadLetter), and the roll must complete before the run ends.

// Definitions a worker runs (workerConfig.Def).
const (
	defA = "" // today's machines
	defB = "B"
)

// BreakRollDeadLetter, in a roll run, gives the workers MaxAttempts 1:
// the first give-back of a saga B wrote dead-letters it (unknown_state),
// which the checker must report.
const BreakRollDeadLetter = "roll-dead-letter"

// faultRollGiveBack is noted in the fault log once per message an A
// worker gave back because B wrote its saga.
const faultRollGiveBack = "roll_give_back"

// stateOpening is the counter's state that only definition B has.
const stateOpening = "Opening"

// rollGrace is how long a worker the roll stopped (SIGTERM) may take to
// exit before it is killed, as an orchestrator's grace period: a stalled
// worker would otherwise hold the roll up for its stall.
const rollGrace = workerLease

// rollMargin is how long, beyond the roll itself, a message given back
// may wait for a B worker: a B worker killed while it is the only one,
// restarted on a loaded machine, a database or broker restart.
const rollMargin = 30 * time.Second

// rollMaxAttempts is the workers' Config.MaxAttempts in a roll run: a
// message an A worker gave back is dead-lettered only after MaxAttempts
// deliveries, and each waits at most the workers' RetryMax (500 ms), so
// the retry schedule spans at least (MaxAttempts-10) × RetryMax: the
// roll (a third of the run) plus rollMargin. Once the roll completed
// every worker runs B and the next delivery succeeds.
func rollMaxAttempts(duration time.Duration) int {
	return 10 + int((duration/3+rollMargin)/workerRetryMax)
}

// counterB is the counter's state document at schema version 2.
type counterB struct {
	Total int `json:"total"`
	// Ticked reports that the saga's Tick was applied (new in version 2).
	Ticked bool `json:"ticked"`
}

// counterMachineB is definition B of the counter saga.
func counterMachineB() *saga.Machine[counterB] {
	m := saga.New[counterB](countersaga.SagaType)
	opening := m.State(stateOpening)
	open := m.State("Open")
	inc := saga.NewEvent[countersaga.Inc](m, func(e countersaga.Inc) string { return e.Key })
	tick := saga.NewEvent[countersaga.Tick](m, func(e countersaga.Tick) string { return e.Key })
	apply := func(c *saga.Context[counterB], e countersaga.Inc) error {
		c.Data.Total += e.N
		c.Publish(countersaga.Added{Key: e.Key, Total: c.Data.Total})
		return nil
	}
	ticked := func(c *saga.Context[counterB], _ countersaga.Tick) error {
		c.Data.Total += 1000
		c.Data.Ticked = true
		return nil
	}
	m.Initially(saga.When(inc).Then(apply).Then(func(c *saga.Context[counterB], e countersaga.Inc) error {
		c.Schedule("tick", time.Millisecond, countersaga.Tick{Key: e.Key})
		return nil
	}).TransitionTo(opening))
	m.During(opening, saga.When(inc).Then(apply), saga.When(tick).Then(ticked).TransitionTo(open))
	m.During(open, saga.When(inc).Then(apply), saga.When(tick).Then(ticked))
	// Version 1 has no ticked: the Tick adds 1000, and the increments of
	// the workload add less than that.
	m.Upgrade(1, func(old json.RawMessage) (json.RawMessage, error) {
		var d counterB
		if err := json.Unmarshal(old, &d); err != nil {
			return nil, err
		}
		d.Ticked = d.Total >= 1000
		return json.Marshal(d)
	})
	return m
}

// searchMachineB is definition B of the search saga: A's machine with its
// document at schema version 2. The format is A's; the upgrade step only
// refuses a version 1 document that names no search.
func searchMachineB() *saga.Machine[searchimport.Search] {
	m := searchimport.New(searchimport.Config{UploadTimeout: uploadTimeout}).Machine
	m.Upgrade(1, func(old json.RawMessage) (json.RawMessage, error) {
		var d searchimport.Search
		if err := json.Unmarshal(old, &d); err != nil {
			return nil, err
		}
		if d.SearchID == "" {
			return nil, errors.New("a search document without search_id")
		}
		return old, nil
	})
	return m
}

// registerMachines registers the saga machines of definition def.
func registerMachines(e *idem.Engine, def string) error {
	if def == defB {
		if err := e.Register(counterMachineB()); err != nil {
			return err
		}
		return e.Register(searchMachineB())
	}
	if err := e.Register(countersaga.Machine()); err != nil {
		return err
	}
	return e.Register(searchimport.New(searchimport.Config{UploadTimeout: uploadTimeout}).Machine)
}

// giveBackCounter is the log handler of a roll run's workers: it notes
// in the fault log every message the engine gives back because its
// saga's state or schema version is unknown to the worker's definition
// (the engine logs each give-back with its error), and passes every
// record on.
type giveBackCounter struct {
	slog.Handler
	f *faults
}

// Handle notes a give-back for an unknown state, then passes r on.
func (h giveBackCounter) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelWarn {
		r.Attrs(func(a slog.Attr) bool {
			if err, ok := a.Value.Any().(error); ok && a.Key == "error" && errors.Is(err, saga.ErrUnknownState) {
				h.f.note(faultRollGiveBack)
				return false
			}
			return true
		})
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs keeps the counter on the derived handler.
func (h giveBackCounter) WithAttrs(as []slog.Attr) slog.Handler {
	return giveBackCounter{Handler: h.Handler.WithAttrs(as), f: h.f}
}

// WithGroup keeps the counter on the derived handler.
func (h giveBackCounter) WithGroup(name string) slog.Handler {
	return giveBackCounter{Handler: h.Handler.WithGroup(name), f: h.f}
}

// rollLogger is the engine's logger of a worker: in a roll run, logger
// with the give-backs counted.
func rollLogger(logger *slog.Logger, f *faults) *slog.Logger {
	if !f.cfg.Roll {
		return logger
	}
	return slog.New(giveBackCounter{Handler: logger.Handler(), f: f})
}

// roller is the driver's rolling deploy: from switchAt every worker that
// starts runs B, and every interval one worker still running A is
// replaced, while none is down. Only the driver's goroutine uses it.
type roller struct {
	switchAt, next time.Time
	interval       time.Duration
	switched       bool
	// switchedAt and doneAt are when the roll began and when no worker
	// ran A any more (zero: not yet).
	switchedAt, doneAt time.Time
	retired            int       // workers the roll stopped to start them as B
	retiredAt          time.Time // when it stopped the last one
}

// newRoller returns the roll of a run that started at start: the first
// worker is replaced at a third of duration, the last at two thirds.
func newRoller(start time.Time, duration time.Duration, workers int) *roller {
	at := start.Add(duration / 3)
	return &roller{switchAt: at, next: at, interval: duration / 3 / time.Duration(max(workers-1, 1))}
}

// defFor is the definition the next worker of a slot runs, after prev
// (nil: the slot's first): B once the roll retired the slot (a replica
// of the new build), else the slot's own (a replica that crashed is
// restarted on its own build, as a supervisor does).
func (ro *roller) defFor(prev *worker) string {
	if ro != nil && prev != nil && (prev.def == defB || prev.retiring) {
		return defB
	}
	return defA
}

// step advances the roll: it switches at switchAt, then retires one A
// worker at a time, each once every worker is up again.
func (ro *roller) step(now time.Time, p *pool) {
	if ro == nil || now.Before(ro.switchAt) || !ro.doneAt.IsZero() {
		return
	}
	if !ro.switched {
		ro.switched, ro.switchedAt = true, now
		p.r.logf("rolling deploy: replacing the workers one at a time with workers of definition B")
	}
	left := -1
	for i, w := range p.slots {
		if w.alive && w.retiring && now.Sub(ro.retiredAt) > rollGrace {
			p.sigkill(i) // its grace period is over, as an orchestrator's
		}
		if !w.alive || w.retiring {
			return // one at a time
		}
		if w.def != defB && left < 0 {
			left = i
		}
	}
	if left < 0 {
		ro.doneAt = now
		p.r.logf("rolling deploy: every worker runs definition B")
		return
	}
	if now.Before(ro.next) {
		return
	}
	ro.next = now.Add(ro.interval)
	w := p.slots[left]
	w.retiring, ro.retiredAt = true, now
	ro.retired++
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
}

// RollSummary sums up the rolling deploy of a roll run.
type RollSummary struct {
	// SwitchedAt and DoneAt are when the roll began and when no worker
	// ran A any more, from the start of the run (DoneAt 0: it did not
	// complete).
	SwitchedAt, DoneAt time.Duration
	// Retired counts the workers the roll stopped (SIGTERM) to start them
	// as B; a kill may have come first.
	Retired int
	// GiveBacks counts the messages A workers gave back because B wrote
	// their saga.
	GiveBacks int
	// MaxAttempts is the workers' Config.MaxAttempts.
	MaxAttempts int
}

// Print writes the summary for people.
func (s *RollSummary) Print(w io.Writer) {
	done := "did not complete"
	if s.DoneAt > 0 {
		done = "complete at " + s.DoneAt.Round(time.Millisecond).String()
	}
	fmt.Fprintf(w, "  rolling deploy A→B: began at %s, %s, %d workers retired one at a time; %d messages given back by A workers (unknown state); MaxAttempts %d\n",
		s.SwitchedAt.Round(time.Millisecond), done, s.Retired, s.GiveBacks, s.MaxAttempts)
}

// rollReport sums up the roll and adds its problems: a roll that did not
// complete, or that no A worker ever met a saga of B in (not a rolling
// deploy: the run would pass vacuously).
func (r *driver) rollReport() {
	ro := r.roll
	if ro == nil {
		return
	}
	s := &RollSummary{Retired: ro.retired, GiveBacks: r.rep.Faults[rollGiveBackFault], MaxAttempts: r.workers.wc.MaxAttempts}
	delete(r.rep.Faults, rollGiveBackFault)
	if ro.switched {
		s.SwitchedAt = ro.switchedAt.Sub(r.start)
	}
	if ro.doneAt.IsZero() && !slices.ContainsFunc(r.workers.slots, func(w *worker) bool { return w.def != defB }) {
		ro.doneAt = time.Now() // the last B worker started while the run settled
	}
	if !ro.doneAt.IsZero() {
		s.DoneAt = ro.doneAt.Sub(r.start)
	} else {
		r.rep.Problems = append(r.rep.Problems, "the rolling deploy did not complete: a worker still ran definition A when the workload ended (run longer)")
	}
	if s.GiveBacks == 0 {
		r.rep.Problems = append(r.rep.Problems, "not a rolling deploy: no A worker gave a message back for a saga B wrote, so A and B never served the same sagas (run longer, or with more workers)")
	}
	r.rep.Roll = s
}

// rollGiveBackFault is the fault count of faultRollGiveBack, which
// rollReport moves into the roll's summary.
const rollGiveBackFault = "roll: given back by A (unknown state)"

package torture

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"
)

// worker is one worker slot: the current process and its generation.
// Only the driver's goroutine reads and writes it (the goroutine that
// waits for the process reports its exit on a channel), so it never reads
// cmd.ProcessState, which cmd.Wait writes.
type worker struct {
	cmd      *exec.Cmd
	gen      int
	alive    bool // started, exit not yet handled
	killedBy bool // the driver sent SIGKILL
	// def is the definition it runs (roll.go), and retiring that the
	// rolling deploy sent it SIGTERM to start it again as B.
	def      string
	retiring bool
}

type exitEvent struct {
	slot, gen int
	state     *os.ProcessState
}

// pool runs the worker processes: it starts them, restarts one that dies
// while the run goes on, counts the kills, and stops them all. Only the
// driver's goroutine uses it.
type pool struct {
	r        *driver
	wc       workerConfig
	slots    []*worker
	exits    chan exitEvent
	out      *lockedWriter
	gen      int
	stopping bool // the driver is stopping the workers: an exit is expected
}

// newPool returns the driver's pool, its workers not started.
func newPool(r *driver) *pool {
	p := &pool{r: r, wc: r.workerConfig(), slots: make([]*worker, r.o.Workers),
		exits: make(chan exitEvent, 64), out: &lockedWriter{w: io.Discard}}
	if r.o.Log != nil {
		p.out.w = r.o.Log
	}
	return p
}

// workerConfig is what every worker process of the run is given; each
// gets its own Seed.
func (r *driver) workerConfig() workerConfig {
	o := &r.o
	wc := workerConfig{Store: r.storeSpec, Schema: r.schema, Transport: r.brokerSpec, Namespace: r.bo.Namespace, Replicas: r.bo.Replicas, Lease: workerLease,
		Break: o.Break, FaultLog: r.faultLog, Limits: o.Limits}
	if o.has(FaultCommitKill) {
		wc.KillAfterCommit = 0.01
		wc.KillAfterScheduleFire = 0.05 // about 2.4 passes a second fire a tick
	}
	if o.has(FaultUoWKill) {
		wc.KillInUoW = 0.002
		wc.KillInSchedulePass = 0.05
	}
	if o.Break == BreakAckBeforeCommit {
		// The breakage shows only when a crash lands between receive and
		// commit: each worker process dies in its third unit of work, so
		// that it does on a loaded machine too (CI once saw 4 kills and
		// none there, and the checker passed the broken engine).
		wc.KillInUoW, wc.KillAtLoad = 0.02, 3
	}
	if o.has(FaultStall) {
		wc.Stall = 0.002
	}
	if o.Roll {
		wc.Roll, wc.MaxAttempts = true, rollMaxAttempts(o.Duration)
		if o.Break == BreakRollDeadLetter {
			wc.MaxAttempts = 1
		}
	}
	return wc
}

// startAll starts a worker in every slot.
func (p *pool) startAll() error {
	for i := range p.slots {
		if err := p.start(i); err != nil {
			return err
		}
	}
	return nil
}

// start starts a worker process in slot; its exit is reported on exits.
func (p *pool) start(slot int) error {
	p.gen++
	c := p.wc
	c.Seed = p.r.o.Seed*1000 + uint64(p.gen)
	c.FlowLog = p.r.flowLogPath(p.gen)
	c.Def = p.r.roll.defFor(p.slots[slot])
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	cmd := p.r.o.Command()
	cmd.Env = append(os.Environ(), WorkerEnv+"="+string(b))
	cmd.Stdout, cmd.Stderr = p.out, p.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start worker: %w", err)
	}
	w := &worker{cmd: cmd, gen: p.gen, alive: true, def: c.Def}
	p.slots[slot] = w
	go func() {
		_ = cmd.Wait()
		p.exits <- exitEvent{slot: slot, gen: w.gen, state: cmd.ProcessState}
	}()
	return nil
}

// handleExit counts a worker's exit and, unless the pool is stopping,
// starts its slot again.
func (p *pool) handleExit(ev exitEvent) error {
	w := p.slots[ev.slot]
	if w == nil || w.gen != ev.gen {
		return nil
	}
	w.alive = false
	p.r.noteExit(ev.gen)
	ws, _ := ev.state.Sys().(syscall.WaitStatus)
	switch {
	case w.killedBy:
		p.r.rep.Kills++
	case ws.Signaled() && ws.Signal() == syscall.SIGKILL:
		p.r.rep.Kills++ // self-inflicted; the fault log says which kind
	case w.retiring: // the rolling deploy stopped it, to start it as B
	case p.stopping:
		return nil
	default:
		p.r.rep.UnexpectedExits++
		p.r.logf("worker %d exited by itself (%s); restarting it", ev.slot, ev.state)
	}
	if p.stopping {
		return nil
	}
	return p.start(ev.slot)
}

// sigkill kills the worker in slot, if it is alive and not being killed;
// it reports whether it sent the signal.
func (p *pool) sigkill(slot int) bool {
	w := p.slots[slot]
	if !w.alive || w.killedBy {
		return false
	}
	w.killedBy = true
	_ = w.cmd.Process.Signal(syscall.SIGKILL)
	return true
}

// stop sends SIGTERM to every worker and waits for them to exit, killing
// those still alive after 20 s (a problem of the run).
func (p *pool) stop(ctx context.Context) error {
	p.stopping = true
	for _, w := range p.slots {
		if w.alive {
			_ = w.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	timeout := time.After(20 * time.Second)
	for slices.ContainsFunc(p.slots, func(w *worker) bool { return w.alive }) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-p.exits:
			if err := p.handleExit(ev); err != nil {
				return err
			}
		case <-timeout:
			p.r.rep.Problems = append(p.r.rep.Problems, "a worker did not stop within 20s of SIGTERM")
			p.kill()
			timeout = nil
		}
	}
	return nil
}

// restart starts every slot again after stop.
func (p *pool) restart() error {
	p.stopping = false
	return p.startAll()
}

// kill sends SIGKILL to every live worker.
func (p *pool) kill() {
	for _, w := range p.slots {
		if w != nil && w.alive {
			_ = w.cmd.Process.Kill()
		}
	}
}

// Package torture is the harness of `idem torture`: it runs worker
// processes of the idem binary on one store, drives a workload of many
// sagas through them while injecting faults on a schedule drawn from a
// seed, records every send in an append-only history, and after the run
// settles checks the history against the database (see Check).
package torture

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Fault names for Options.Faults.
const (
	FaultDuplicates = "dup"         // every message published 1–4 times, copies through different publishers at once
	FaultKill       = "kill"        // the driver SIGKILLs a random worker at random moments
	FaultCommitKill = "commit-kill" // a worker SIGKILLs itself right after a commit, before ack and outbox send
	FaultUoWKill    = "uow-kill"    // a worker SIGKILLs itself between load and commit
	FaultStall      = "stall"       // a worker stalls past its lease before committing
	FaultStaleTimer = "stale-timer" // timers re-delivered after the saga moved on
	FaultBadInput   = "bad-input"   // malformed, unknown, badly keyed and oversized messages mixed in
	FaultPGRestart  = "pg-restart"  // PostgreSQL restarted while work is in flight (needs PGRestartCmd)
	// FaultBrokerRestart restarts the broker while work is in flight: the
	// driver's own embedded NATS server, or any broker with
	// BrokerRestartCmd.
	FaultBrokerRestart = "broker-restart"
)

// TransportEmbedded is the Options.Transport that makes the driver start
// one nats-server in its own process, with JetStream files under the run's
// directory, and give its URL to the publishers and workers.
const TransportEmbedded = "nats-embedded"

// AllFaults is the default fault mix.
var AllFaults = []string{FaultDuplicates, FaultKill, FaultCommitKill, FaultUoWKill, FaultStall, FaultStaleTimer, FaultBadInput, FaultPGRestart, FaultBrokerRestart}

// Options configure a run.
type Options struct {
	// Store is "sqlite" (a file in Dir) or a postgres:// URL (a fresh
	// schema per run). The store is also the queue unless Transport is set.
	Store string
	// Transport is a broker spec opened with OpenTransport (nats://…,
	// amqp://…) or TransportEmbedded; empty means the store's own queue.
	Transport string
	// Duration is how long the workload is sent and faults injected; the
	// run then settles (at most Settle) and is checked.
	Duration, Settle time.Duration
	// Seed draws the workload and the fault schedule.
	Seed uint64
	// Workers is the number of worker processes. Default 3.
	Workers int
	// Faults is the fault mix (Fault* names). Nil means AllFaults.
	Faults []string
	// MinKills fails the run if fewer worker kills happened.
	MinKills int
	// PGRestartCmd is a shell command that restarts the PostgreSQL server
	// (run with sh -c), for FaultPGRestart.
	PGRestartCmd string
	// BrokerRestartCmd is a shell command that restarts the broker (run
	// with sh -c), for FaultBrokerRestart with an external broker. With
	// TransportEmbedded the driver restarts its own server and ignores it.
	BrokerRestartCmd string
	// Dir holds the history, the fault log and the SQLite file. Empty
	// means a temporary directory, removed after a passing run.
	Dir string
	// Break names a deliberate breakage (BreakSkipInbox,
	// BreakAckBeforeCommit), to show the checker fails.
	Break string
	// Command returns the command that starts one worker process; the
	// driver adds WorkerEnv to its environment.
	Command func() *exec.Cmd
	// Log receives progress lines. Nil discards them.
	Log io.Writer
}

// Report is the outcome of a run.
type Report struct {
	Store, Transport string
	Seed             uint64
	Workers          int
	Dir              string
	Elapsed          time.Duration
	// Sent counts logical messages; Published counts copies.
	Sent, Published int
	// Faults counts each fault injected, by name.
	Faults map[string]int
	// Kills is the total of worker SIGKILLs (driver and self-inflicted).
	Kills int
	// UnexpectedExits counts workers that exited by themselves.
	UnexpectedExits int
	Journal         int
	// Ticks counts the schedules' ticks, from the audit of their advances.
	Ticks      TickCounts
	Violations []Violation
	// Problems are failures of the run itself (not settled, too few kills).
	Problems []string
}

// Pass reports whether no invariant failed and the run did what it should.
func (r *Report) Pass() bool { return len(r.Violations) == 0 && len(r.Problems) == 0 }

// Print writes the report for people.
func (r *Report) Print(w io.Writer) {
	fmt.Fprintf(w, "idem torture: store %s, transport %s, %d workers, seed %d, %s\n", r.Store, r.Transport, r.Workers, r.Seed, r.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "  messages sent: %d logical, %d published copies; journal entries: %d\n", r.Sent, r.Published, r.Journal)
	fmt.Fprintf(w, "  schedule ticks: %d fired, %d coalesced (fire once), %d skipped (skip missed)\n", r.Ticks.Fired, r.Ticks.Coalesced, r.Ticks.Skipped)
	fmt.Fprintln(w, "  faults injected:")
	names := make([]string, 0, len(r.Faults))
	for k := range r.Faults {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		fmt.Fprintf(w, "    %-28s %d\n", k, r.Faults[k])
	}
	fmt.Fprintf(w, "    %-28s %d\n", "worker kills (total)", r.Kills)
	if r.UnexpectedExits > 0 {
		fmt.Fprintf(w, "  workers that exited by themselves (restarted): %d\n", r.UnexpectedExits)
	}
	fmt.Fprintf(w, "  history and fault log: %s\n", r.Dir)
	for _, p := range r.Problems {
		fmt.Fprintf(w, "  PROBLEM: %s\n", p)
	}
	if len(r.Violations) > 0 {
		by := map[string]int{}
		for _, v := range r.Violations {
			by[v.Invariant]++
		}
		invs := make([]string, 0, len(by))
		for k, n := range by {
			invs = append(invs, fmt.Sprintf("%s %d", k, n))
		}
		sort.Strings(invs)
		fmt.Fprintf(w, "  %d violations (%s):\n", len(r.Violations), strings.Join(invs, ", "))
		for i, v := range r.Violations {
			if i == 50 {
				fmt.Fprintf(w, "    ... and %d more\n", len(r.Violations)-50)
				break
			}
			fmt.Fprintf(w, "    %s\n", v)
		}
	}
	if r.Pass() {
		fmt.Fprintln(w, "PASS: every message and schedule tick applied exactly once, every saga in its predicted state")
	} else {
		fmt.Fprintln(w, "FAIL")
	}
}

const workerLease = 2 * time.Second

func (o *Options) validate() error {
	if o.Workers == 0 {
		o.Workers = 3
	}
	if o.Faults == nil {
		o.Faults = AllFaults
	}
	if o.Settle == 0 {
		o.Settle = 3 * time.Minute
	}
	switch {
	case o.Store == "memory":
		return errors.New("--store memory: the in-memory store lives in one process and cannot be shared by worker processes, nor survive their kills; use sqlite or postgres://")
	case o.Store != "sqlite" && !isPostgres(o.Store):
		return fmt.Errorf("--store %q: want sqlite or a postgres:// URL", o.Store)
	case o.Workers < 1:
		return fmt.Errorf("--workers must be at least 1, got %d", o.Workers)
	case o.Duration <= 0:
		return fmt.Errorf("--duration must be positive, got %s", o.Duration)
	case o.Command == nil:
		return errors.New("torture: Options.Command is nil")
	case o.Break != "" && o.Break != BreakSkipInbox && o.Break != BreakAckBeforeCommit:
		return fmt.Errorf("unknown breakage %q", o.Break)
	}
	for _, f := range o.Faults {
		if !slices.Contains(AllFaults, f) {
			return fmt.Errorf("unknown fault %q: known faults are %s", f, strings.Join(AllFaults, ","))
		}
	}
	return nil
}

func (o *Options) has(f string) bool { return slices.Contains(o.Faults, f) }

// worker is one worker slot: the current process and its generation.
// Only the driver's goroutine reads and writes it (the goroutine that
// waits for the process reports its exit on a channel), so it never reads
// cmd.ProcessState, which cmd.Wait writes.
type worker struct {
	cmd      *exec.Cmd
	gen      int
	alive    bool // started, exit not yet handled
	killedBy bool // the driver sent SIGKILL
}

type exitEvent struct {
	slot, gen int
	state     *os.ProcessState
}

// Run drives one torture run and checks it. The error is for a run that
// could not be carried out; a run that found violations returns a report
// whose Pass is false.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, "torture: "+format+"\n", args...)
		}
	}
	start := time.Now()
	dir := o.Dir
	temp := false
	if dir == "" {
		d, err := os.MkdirTemp("", "idem-torture-")
		if err != nil {
			return nil, fmt.Errorf("create a work directory: %w", err)
		}
		dir, temp = d, true
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	rep := &Report{Store: o.Store, Transport: redactURL(o.Transport), Seed: o.Seed, Workers: o.Workers, Dir: dir, Faults: map[string]int{}}
	if rep.Transport == "" {
		rep.Transport = "the store's own queue"
	}
	storeSpec, schema := o.Store, ""
	if o.Store == "sqlite" {
		storeSpec = filepath.Join(dir, "idem.db")
	} else {
		schema = fmt.Sprintf("torture_%d_%d", o.Seed, time.Now().UnixNano()%1e9)
		rep.Store = "postgres (schema " + schema + ")"
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	rng := rand.New(rand.NewPCG(o.Seed, 0x7047))

	// A broker gets the run's own namespace, so nothing another run left
	// is counted or delivered; nats-embedded is one server in this process
	// that every publisher and worker connects to.
	brokerSpec := o.Transport
	bo := BrokerOptions{Lease: workerLease}
	var nats *embeddedNATS
	if o.Transport != "" {
		bo.Namespace = fmt.Sprintf("torture_%d_%d", o.Seed, time.Now().UnixNano()%1e9)
	}
	if o.Transport == TransportEmbedded {
		var err error
		if nats, err = startNATS(ctx, filepath.Join(dir, "nats")); err != nil {
			return nil, err
		}
		defer nats.stop()
		brokerSpec = nats.url
		rep.Transport = "nats-embedded (" + nats.url + ", files in " + nats.dir + ")"
	}
	if o.Transport != "" {
		rep.Transport += ", namespace " + bo.Namespace
	}

	// Two publishers, on their own connections: copies of one message go
	// through both at once.
	var pubs []transport.Transport
	var st store.Store
	for i := range 2 {
		s, tr, closeFn, err := retryOpen(ctx, func() (store.Store, transport.Transport, func(), error) {
			return openBackend(ctx, storeSpec, schema, brokerSpec, bo, logger, false)
		})
		if err != nil {
			return nil, err
		}
		defer closeFn()
		if i == 0 {
			st = s
		}
		pubs = append(pubs, tr)
	}
	// natsjs counts the backlog across every process; rabbitmq counts the
	// ready messages of every queue, and only its own unacknowledged
	// deliveries (AMQP 0-9-1 cannot see other connections'). The settle
	// rule (docs/reliability.md) is sound with either.
	var broker transport.PendingCounter
	if o.Transport != "" {
		var ok bool
		if broker, ok = pubs[0].(transport.PendingCounter); !ok {
			return nil, fmt.Errorf("--transport %s: the transport (%T) cannot count its backlog (no Pending method), so the run could not tell when it settled", o.Transport, pubs[0])
		}
	}
	db, err := openDB(storeSpec, schema)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	hist, err := createHistory(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return nil, err
	}
	// The schedules: audited from their creation by the first worker.
	if err := installScheduleAudit(ctx, storeSpec, schema); err != nil {
		return nil, err
	}
	if err := hist.append(scheduleRecords(runSchedules)...); err != nil {
		return nil, err
	}
	sched := st.(store.Scheduler) // both SQL stores are
	copier := &tickCopier{st: sched, pub: pubs[1], db: db}
	faultLog := filepath.Join(dir, "faults.log")

	// Workers.
	wc := workerConfig{Store: storeSpec, Schema: schema, Transport: brokerSpec, Namespace: bo.Namespace, Lease: workerLease,
		Break: o.Break, FaultLog: faultLog}
	if o.has(FaultCommitKill) {
		wc.KillAfterCommit = 0.01
		wc.KillAfterScheduleFire = 0.05 // about 2.4 passes a second fire a tick
	}
	if o.has(FaultUoWKill) {
		wc.KillInUoW = 0.002
		wc.KillInSchedulePass = 0.05
	}
	if o.Break == BreakAckBeforeCommit {
		wc.KillInUoW = 0.02 // the breakage shows only when a crash lands between receive and commit
	}
	if o.has(FaultStall) {
		wc.Stall = 0.002
	}
	workers := make([]*worker, o.Workers)
	exits := make(chan exitEvent, 64)
	workerOut := &lockedWriter{w: io.Discard}
	if o.Log != nil {
		workerOut.w = o.Log
	}
	gen := 0
	startWorker := func(slot int) error {
		gen++
		c := wc
		c.Seed = o.Seed*1000 + uint64(gen)
		b, err := json.Marshal(c)
		if err != nil {
			return err
		}
		cmd := o.Command()
		cmd.Env = append(os.Environ(), WorkerEnv+"="+string(b))
		cmd.Stdout, cmd.Stderr = workerOut, workerOut
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
		w := &worker{cmd: cmd, gen: gen, alive: true}
		workers[slot] = w
		go func() {
			_ = cmd.Wait()
			exits <- exitEvent{slot: slot, gen: w.gen, state: cmd.ProcessState}
		}()
		return nil
	}
	for i := range workers {
		if err := startWorker(i); err != nil {
			return nil, err
		}
	}
	stopping := false
	defer func() {
		for _, w := range workers {
			if w != nil && w.alive {
				_ = w.cmd.Process.Kill()
			}
		}
	}()
	handleExit := func(ev exitEvent) error {
		w := workers[ev.slot]
		if w == nil || w.gen != ev.gen {
			return nil
		}
		w.alive = false
		ws, _ := ev.state.Sys().(syscall.WaitStatus)
		switch {
		case w.killedBy:
			rep.Kills++
		case ws.Signaled() && ws.Signal() == syscall.SIGKILL:
			rep.Kills++ // self-inflicted; the fault log says which kind
		case stopping:
			return nil
		default:
			rep.UnexpectedExits++
			logf("worker %d exited by itself (%s); restarting it", ev.slot, ev.state)
		}
		if stopping {
			return nil
		}
		return startWorker(ev.slot)
	}

	// The sender: waves of messages, every message 1–4 times.
	gen0 := &generator{rng: rand.New(rand.NewPCG(o.Seed, 0x3a7e)), bad: o.has(FaultBadInput)}
	sendCtx, stopSending := context.WithCancel(ctx)
	defer stopSending()
	var sendMu sync.Mutex // guards sendErr and rep's counts while the sender runs
	count := func(fault string, n int) {
		sendMu.Lock()
		defer sendMu.Unlock()
		rep.Faults[fault] += n
	}
	var sendErr error
	sendDone := make(chan struct{})
	// firstWave closes once a wave is published: the run lasts until then
	// even past its Duration, because a run that sent nothing (its workers
	// were slow to start on a loaded machine) proves nothing.
	firstWave := make(chan struct{})
	var firstOnce sync.Once
	go func() {
		defer close(sendDone)
		srng := rand.New(rand.NewPCG(o.Seed, 0x5e4d))
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-sendCtx.Done():
				return
			case <-t.C:
			}
			wave := gen0.next()
			perPub := make([][]idem.Envelope, len(pubs))
			for _, s := range wave {
				copies := 1
				if o.has(FaultDuplicates) {
					copies = 1 + srng.IntN(4)
				}
				s.rec.Copies = copies
				first := srng.IntN(len(pubs))
				for c := range copies {
					p := (first + c) % len(pubs)
					perPub[p] = append(perPub[p], s.env.Clone())
				}
			}
			recs := make([]*Record, len(wave))
			for i := range wave {
				recs[i] = wave[i].rec
			}
			// Recorded before it is published: a send the workers never
			// see is then a loss the checker reports.
			if err := hist.append(recs...); err != nil {
				sendMu.Lock()
				sendErr = err
				sendMu.Unlock()
				return
			}
			var wg sync.WaitGroup
			for p := range pubs {
				srng.Shuffle(len(perPub[p]), func(i, j int) { perPub[p][i], perPub[p][j] = perPub[p][j], perPub[p][i] })
				wg.Go(func() {
					if err := publishRetry(ctx, pubs[p], perPub[p]); err != nil {
						sendMu.Lock()
						sendErr = err
						sendMu.Unlock()
					}
				})
			}
			wg.Wait()
			sendMu.Lock()
			rep.Sent += len(wave)
			for _, s := range wave {
				rep.Published += s.rec.Copies
				if s.rec.Copies > 1 {
					rep.Faults["duplicate copies published"] += s.rec.Copies - 1
				}
				if s.rec.Kind == kindBad {
					rep.Faults["bad inputs"]++
				}
			}
			sendMu.Unlock()
			firstOnce.Do(func() { close(firstWave) })
		}
	}()

	// The fault schedule.
	deadline := start.Add(o.Duration)
	nextKill := time.Now().Add(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
	nextRestart := start.Add(o.Duration * 2 / 5)
	brokerRestarts := o.has(FaultBrokerRestart) && (nats != nil || o.Transport != "" && o.BrokerRestartCmd != "")
	nextBrokerRestart := start.Add(o.Duration * 3 / 5)
	// A broker restart runs beside the schedule (a RabbitMQ node takes
	// seconds to come back): workers keep dying meanwhile.
	restarted := make(chan error, 1)
	restarting := false
	restartBroker := func() error {
		if nats != nil {
			logf("restarting the embedded NATS server")
			return nats.restart(ctx)
		}
		logf("restarting the broker: %s", o.BrokerRestartCmd)
		return runRestartCmd(ctx, "--broker-restart-cmd", o.BrokerRestartCmd)
	}
	timers := map[string]store.Timer{}
	replayed := map[string]bool{}
	nextTimerScan := time.Now()
	nextTickCopy := time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	logf("running %s on %s with %d workers (seed %d), work in %s", o.Duration, rep.Store, o.Workers, o.Seed, dir)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case ev := <-exits:
			if err := handleExit(ev); err != nil {
				return nil, err
			}
			continue
		case err := <-restarted:
			if err != nil {
				return nil, err
			}
			restarting = false
			count("broker restarts", 1)
			nextBrokerRestart = time.Now().Add(max(30*time.Second, o.Duration/3))
			continue
		case <-tick.C:
		}
		now := time.Now()
		if o.has(FaultKill) && now.After(nextKill) {
			i := rng.IntN(len(workers))
			w := workers[i]
			if w.alive && !w.killedBy {
				w.killedBy = true
				_ = w.cmd.Process.Signal(syscall.SIGKILL)
				count("SIGKILL by the driver", 1)
			}
			nextKill = now.Add(time.Duration(300+rng.IntN(1700)) * time.Millisecond)
		}
		if o.has(FaultPGRestart) && isPostgres(o.Store) && o.PGRestartCmd != "" && now.After(nextRestart) {
			logf("restarting PostgreSQL: %s", o.PGRestartCmd)
			if err := runRestartCmd(ctx, "--pg-restart-cmd", o.PGRestartCmd); err != nil {
				return nil, err
			}
			count("PostgreSQL restarts", 1)
			nextRestart = now.Add(max(30*time.Second, o.Duration/3))
		}
		if brokerRestarts && !restarting && now.After(nextBrokerRestart) {
			restarting = true
			go func() { restarted <- restartBroker() }()
		}
		if o.has(FaultStaleTimer) && now.After(nextTimerScan) {
			nextTimerScan = now.Add(300 * time.Millisecond)
			n, err := replayStaleTimers(ctx, st, pubs[0], hist, timers, replayed)
			if err != nil {
				logf("stale timer scan: %v", err) // the database may be restarting
			}
			count("stale timer deliveries", n)
		}
		if o.has(FaultDuplicates) && now.After(nextTickCopy) {
			nextTickCopy = now.Add(300 * time.Millisecond)
			n, err := copier.copyNew(ctx)
			if err != nil {
				logf("copy schedule ticks: %v", err) // the database may be restarting
			}
			count("duplicate schedule ticks", n)
		}
	}
	if restarting {
		if err := <-restarted; err != nil {
			return nil, err
		}
		count("broker restarts", 1)
	}
	select {
	case <-firstWave:
	case <-sendDone: // the sender failed: its error is reported below
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	stopSending()
	<-sendDone
	// The schedules are workload too: they stop with it.
	if err := pauseSchedules(ctx, sched, runSchedules); err != nil {
		return nil, err
	}
	sendMu.Lock()
	err = sendErr
	sendMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("send the workload: %w", err)
	}
	if err := hist.close(); err != nil {
		return nil, err
	}
	logf("sent %d messages (%d copies); settling", rep.Sent, rep.Published)

	// Settle (docs/reliability.md, "When a run has settled"): the workers
	// keep running (restarted if they die) until nothing has been in
	// flight for a quiet window, then they stop, and nothing may be left
	// once they are gone; if something is, they start again.
	quiet := time.Second
	if o.Transport != "" {
		// Longer than a lease: a delivery a stalled or dead worker holds,
		// which a broker may not count, is requeued within it.
		quiet = workerLease + time.Second
	}
	const poll = 200 * time.Millisecond
	backlog := func() (int, error) {
		n, err := inFlight(ctx, db, o.Transport == "")
		if err != nil || broker == nil {
			return n, err
		}
		ready, unacked, err := broker.Pending(ctx)
		if err != nil {
			return 0, fmt.Errorf("count the broker's backlog: %w", err)
		}
		return n + ready + unacked, nil
	}
	// quietFor polls backlog until it has been 0 for d; it returns the
	// last count, which is not 0 when the settle deadline passed first or,
	// with eager, as soon as the count is not 0 (-1: never counted).
	settleBy := time.Now().Add(o.Settle)
	quietFor := func(d time.Duration, eager bool) (int, error) {
		var since time.Time // when the backlog was last seen non-zero
		left := -1
		for {
			select {
			case <-ctx.Done():
				return 0, ctx.Err()
			case ev := <-exits:
				if err := handleExit(ev); err != nil {
					return 0, err
				}
				since = time.Time{}
				continue
			case <-time.After(poll): // polling the database and broker with a deadline
			}
			n, err := backlog()
			switch {
			case err != nil:
				logf("settle: %v", err) // a restarting server
				since = time.Time{}
			case n > 0 && eager:
				return n, nil
			case n > 0:
				left, since = n, time.Time{}
			case since.IsZero():
				left, since = 0, time.Now()
			case time.Since(since) >= d:
				return 0, nil
			}
			if time.Now().After(settleBy) {
				return left, nil
			}
		}
	}
	stopWorkers := func() error {
		stopping = true
		for _, w := range workers {
			if w.alive {
				_ = w.cmd.Process.Signal(syscall.SIGTERM)
			}
		}
		timeout := time.After(20 * time.Second)
		for slices.ContainsFunc(workers, func(w *worker) bool { return w.alive }) {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case ev := <-exits:
				if err := handleExit(ev); err != nil {
					return err
				}
			case <-timeout:
				rep.Problems = append(rep.Problems, "a worker did not stop within 20s of SIGTERM")
				for _, w := range workers {
					if w.alive {
						_ = w.cmd.Process.Kill()
					}
				}
				timeout = nil
			}
		}
		return nil
	}
	for round := 1; ; round++ {
		left, err := quietFor(quiet, false)
		if err != nil {
			return nil, err
		}
		if left != 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("not settled after %s: %d messages and timers still in flight", o.Settle, left))
			if err := stopWorkers(); err != nil {
				return nil, err
			}
			break
		}
		if err := stopWorkers(); err != nil {
			return nil, err
		}
		// Nobody consumes now: whatever a worker held unacknowledged is
		// back in the broker's count (RabbitMQ requeues a closed
		// connection's deliveries, JetStream counts them pending), so a
		// count of zero over a second is everything.
		if left, err = quietFor(time.Second, true); err != nil {
			return nil, err
		}
		if left == 0 {
			break
		}
		if time.Now().After(settleBy) {
			rep.Problems = append(rep.Problems, fmt.Sprintf("not settled after %s: %d messages and timers left once the workers stopped", o.Settle, left))
			break
		}
		logf("settle round %d: %d messages or timers left once the workers stopped; starting them again", round, left)
		stopping = false
		for i := range workers {
			if err := startWorker(i); err != nil {
				return nil, err
			}
		}
	}

	// Count the workers' own faults.
	if b, err := os.ReadFile(faultLog); err == nil {
		for _, l := range strings.Fields(string(b)) {
			switch l {
			case faultKillAfterCommit:
				rep.Faults["SIGKILL after commit (self)"]++
			case faultKillInUoW:
				rep.Faults["SIGKILL before commit (self)"]++
			case faultStall:
				rep.Faults["lease expiry (stalled worker)"]++
			case faultKillInSchedule:
				rep.Faults["SIGKILL in schedule pass"]++
			case faultKillAfterFire:
				rep.Faults["SIGKILL after schedule fire"]++
			}
		}
	}
	if rep.Kills < o.MinKills {
		rep.Problems = append(rep.Problems, fmt.Sprintf("only %d worker kills, want at least %d (--kills): run longer", rep.Kills, o.MinKills))
	}

	records, err := ReadHistory(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return nil, err
	}
	if rep.Violations, rep.Ticks, err = check(ctx, records, st, db); err != nil {
		return nil, err
	}
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM idem_journal`).Scan(&rep.Journal); err != nil {
		return nil, fmt.Errorf("count the journal: %w", err)
	}
	rep.Elapsed = time.Since(start)
	if d, ok := pubs[0].(NamespaceDeleter); ok && rep.Pass() && nats == nil {
		if err := d.DeleteNamespace(ctx); err != nil {
			logf("delete the broker namespace %s: %v", bo.Namespace, err)
		}
	}
	if nats != nil {
		nats.stop() // before its files go
	}
	if temp && rep.Pass() {
		os.RemoveAll(dir)
		rep.Dir += " (removed: the run passed)"
	}
	if schema != "" && rep.Pass() {
		if _, err := db.ExecContext(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			logf("drop schema %s: %v", schema, err)
		}
	}
	return rep, nil
}

// inFlight counts what is still to be processed: queued messages (when
// the store is the queue), timers and unsent outbox rows.
func inFlight(ctx context.Context, db *sql.DB, queue bool) (int, error) {
	q := `SELECT (SELECT count(*) FROM idem_timers) + (SELECT count(*) FROM idem_outbox WHERE sent_at IS NULL)`
	if queue {
		q += ` + (SELECT count(*) FROM idem_queue)`
	}
	var n int
	if err := db.QueryRowContext(ctx, q).Scan(&n); err != nil {
		return 0, fmt.Errorf("count what is in flight: %w", err)
	}
	return n, nil
}

// publishRetry publishes envs, retrying while the database is unavailable
// (a PostgreSQL restart) for up to a minute.
func publishRetry(ctx context.Context, p transport.Publisher, envs []idem.Envelope) error {
	deadline := time.Now().Add(time.Minute)
	for start := 0; start < len(envs); {
		end := min(start+200, len(envs))
		err := p.Publish(ctx, envs[start:end])
		if err == nil {
			start = end
			continue
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("publish %d messages: %w", end-start, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond): // the database is coming back
		}
	}
	return nil
}

// lockedWriter serialises the writes of several worker processes.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// redactURL hides the password of a URL (a broker's), for reports.
func redactURL(raw string) string {
	var out []string
	for _, one := range strings.Split(raw, ",") {
		if u, err := url.Parse(one); err == nil && u.User != nil {
			one = u.Redacted()
		}
		out = append(out, one)
	}
	return strings.Join(out, ",")
}

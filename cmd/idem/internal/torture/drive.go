package torture

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// sender publishes the workload in waves, every message 1–4 times, on its
// own goroutine until it is stopped.
type sender struct {
	r    *driver
	gen  *generator
	rng  *rand.Rand
	stop context.CancelFunc
	mu   sync.Mutex // guards err and the run's counts while the sender runs
	err  error
	done chan struct{}
	// firstWave closes once a wave is published: the run lasts until then
	// even past its Duration, because a run that sent nothing (its workers
	// were slow to start on a loaded machine) proves nothing.
	firstWave chan struct{}
	firstOnce sync.Once
}

// startSender starts sending waves every 250 ms.
func (r *driver) startSender(ctx context.Context) *sender {
	s := &sender{r: r, gen: &generator{rng: rand.New(rand.NewPCG(r.o.Seed, 0x3a7e)), bad: r.o.has(FaultBadInput), limits: r.o.Limits},
		rng: rand.New(rand.NewPCG(r.o.Seed, 0x5e4d)), done: make(chan struct{}), firstWave: make(chan struct{})}
	sendCtx, stop := context.WithCancel(ctx)
	s.stop = stop
	go s.loop(ctx, sendCtx)
	return s
}

// count adds n to a fault's count.
func (s *sender) count(fault string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.r.rep.Faults[fault] += n
}

// fail records the sender's error.
func (s *sender) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.err = err
}

// loop sends a wave at every tick until sendCtx ends or a wave fails; it
// publishes with ctx, the run's.
func (s *sender) loop(ctx, sendCtx context.Context) {
	defer close(s.done)
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-sendCtx.Done():
			return
		case <-t.C:
		}
		if !s.wave(ctx) {
			return
		}
		s.firstOnce.Do(func() { close(s.firstWave) })
	}
}

// wave records and publishes one wave; false means the history could not
// be written.
func (s *sender) wave(ctx context.Context) bool {
	wave := s.gen.next()
	pubs := s.r.pubs
	perPub := make([][]idem.Envelope, len(pubs))
	for _, m := range wave {
		copies := 1
		if s.r.o.has(FaultDuplicates) {
			copies = 1 + s.rng.IntN(4)
		}
		m.rec.Copies = copies
		first := s.rng.IntN(len(pubs))
		for c := range copies {
			p := (first + c) % len(pubs)
			perPub[p] = append(perPub[p], m.env.Clone())
		}
	}
	recs := make([]*Record, len(wave))
	for i := range wave {
		recs[i] = wave[i].rec
	}
	// Recorded before it is published: a send the workers never see is
	// then a loss the checker reports.
	if err := s.r.hist.append(recs...); err != nil {
		s.fail(err)
		return false
	}
	var wg sync.WaitGroup
	for p := range pubs {
		s.rng.Shuffle(len(perPub[p]), func(i, j int) { perPub[p][i], perPub[p][j] = perPub[p][j], perPub[p][i] })
		wg.Go(func() {
			if err := publishRetry(ctx, pubs[p], perPub[p]); err != nil {
				s.fail(err)
			}
		})
	}
	wg.Wait()
	if r := s.r; r.o.Limits {
		if err := r.hist.append(&Record{Kind: kindPublished}); err != nil {
			s.fail(err)
			return false
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := s.r.rep
	rep.Sent += len(wave)
	for _, m := range wave {
		rep.Published += m.rec.Copies
		if m.rec.Copies > 1 {
			rep.Faults["duplicate copies published"] += m.rec.Copies - 1
		}
		if m.rec.Kind == kindBad {
			rep.Faults["bad inputs"]++
		}
	}
	return true
}

// faultPlan is the driver's schedule of faults: when each is next due,
// drawn from the run's seed.
type faultPlan struct {
	nextKill, nextRestart, nextBrokerRestart time.Time
	brokerRestarts                           bool
	// restarted receives the outcome of a broker restart, which runs
	// beside the schedule (a RabbitMQ node takes seconds to come back):
	// workers keep dying meanwhile.
	restarted     chan error
	restarting    bool
	timers        map[string]store.Timer
	replayed      map[string]bool
	nextTimerScan time.Time
	nextTickCopy  time.Time
	// failedOver receives each failover once the cluster is healthy
	// again; failovers run beside the schedule, one at a time.
	failedOver   chan Failover
	failingOver  bool
	nextFailover time.Time
	// fencing: the failover in progress is a fence, during which the
	// driver kills no worker (a worker started again opens new
	// connections, which would leave the fenced primary by themselves).
	fencing bool
}

// plan returns the fault schedule of a run that starts now.
func (r *driver) plan() *faultPlan {
	o := &r.o
	return &faultPlan{
		nextKill:          time.Now().Add(time.Duration(300+r.rng.IntN(1200)) * time.Millisecond),
		nextRestart:       r.start.Add(o.Duration * 2 / 5),
		brokerRestarts:    o.has(FaultBrokerRestart) && (r.nats != nil || o.Transport != "" && o.BrokerRestartCmd != ""),
		nextBrokerRestart: r.start.Add(o.Duration * 3 / 5),
		restarted:         make(chan error, 1),
		timers:            map[string]store.Timer{},
		replayed:          map[string]bool{},
		nextTimerScan:     time.Now(),
		nextTickCopy:      time.Now(),
		failedOver:        make(chan Failover, 1),
		nextFailover:      r.start.Add(o.Duration / 10),
	}
}

// drive sends the workload and injects faults for the run's Duration (and
// until a first wave is out), then stops sending and pauses the schedules.
func (r *driver) drive(ctx context.Context) error {
	s := r.startSender(ctx)
	defer s.stop()
	f := r.plan()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := r.start.Add(r.o.Duration)
	r.logf("running %s on %s with %d workers (seed %d), work in %s", r.o.Duration, r.rep.Store, r.o.Workers, r.o.Seed, r.dir)
	for time.Now().Before(deadline) || r.failoversDue(f) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev := <-r.workers.exits:
			if err := r.workers.handleExit(ev); err != nil {
				return err
			}
			continue
		case err := <-f.restarted:
			if err != nil {
				return err
			}
			f.restarting = false
			s.count("broker restarts", 1)
			f.nextBrokerRestart = time.Now().Add(max(30*time.Second, r.o.Duration/3))
			continue
		case fo := <-f.failedOver:
			r.failedOver(f, s, fo)
			continue
		case <-tick.C:
		}
		if err := r.inject(ctx, f, s); err != nil {
			return err
		}
	}
	if f.restarting {
		if err := <-f.restarted; err != nil {
			return err
		}
		s.count("broker restarts", 1)
	}
	if f.failingOver {
		r.failedOver(f, s, <-f.failedOver)
	}
	return r.stopSending(ctx, s)
}

// inject injects every fault that is due.
func (r *driver) inject(ctx context.Context, f *faultPlan, s *sender) error {
	o := &r.o
	now := time.Now()
	if o.has(FaultKill) && now.After(f.nextKill) && !f.fencing {
		if r.workers.sigkill(r.rng.IntN(len(r.workers.slots))) {
			s.count("SIGKILL by the driver", 1)
		}
		f.nextKill = now.Add(time.Duration(300+r.rng.IntN(1700)) * time.Millisecond)
	}
	r.roll.step(now, r.workers)
	if o.has(FaultPGRestart) && isPostgres(o.Store) && o.PGRestartCmd != "" && now.After(f.nextRestart) {
		r.logf("restarting PostgreSQL: %s", o.PGRestartCmd)
		if err := runRestartCmd(ctx, "--pg-restart-cmd", o.PGRestartCmd); err != nil {
			return err
		}
		s.count("PostgreSQL restarts", 1)
		f.nextRestart = now.Add(max(30*time.Second, o.Duration/3))
	}
	if f.brokerRestarts && !f.restarting && now.After(f.nextBrokerRestart) {
		f.restarting = true
		go func() { f.restarted <- r.restartBroker(ctx) }()
	}
	if r.ha != nil && !f.failingOver && now.After(f.nextFailover) && (now.Before(r.start.Add(o.Duration)) || r.failoversDue(f)) {
		f.failingOver = true
		kind := r.ha.kinds[len(r.failovers)%len(r.ha.kinds)]
		f.fencing = kind == FailoverFence
		go func() { f.failedOver <- r.ha.cause(ctx, kind) }()
	}
	if o.has(FaultStaleTimer) && now.After(f.nextTimerScan) {
		f.nextTimerScan = now.Add(300 * time.Millisecond)
		n, err := replayStaleTimers(ctx, r.st, r.pubs[0], r.hist, f.timers, f.replayed)
		if err != nil {
			r.logf("stale timer scan: %v", err) // the database may be restarting
		}
		s.count("stale timer deliveries", n)
	}
	if o.has(FaultDuplicates) && now.After(f.nextTickCopy) {
		f.nextTickCopy = now.Add(300 * time.Millisecond)
		n, err := r.copier.copyNew(ctx)
		if err != nil {
			r.logf("copy schedule ticks: %v", err) // the database may be restarting
		}
		s.count("duplicate schedule ticks", n)
	}
	return nil
}

// restartBroker restarts the embedded NATS server, or runs the broker's
// restart command.
func (r *driver) restartBroker(ctx context.Context) error {
	if r.nats != nil {
		r.logf("restarting %s", r.nats.describe())
		return r.nats.restart(ctx)
	}
	r.logf("restarting the broker: %s", r.o.BrokerRestartCmd)
	return runRestartCmd(ctx, "--broker-restart-cmd", r.o.BrokerRestartCmd)
}

// stopSending waits for a first wave, stops the sender and the schedules
// (they are workload too), and closes the history.
func (r *driver) stopSending(ctx context.Context, s *sender) error {
	select {
	case <-s.firstWave:
	case <-s.done: // the sender failed: its error is reported below
	case <-ctx.Done():
		return ctx.Err()
	}
	s.stop()
	<-s.done
	if err := pauseSchedules(ctx, r.sched, runSchedules); err != nil {
		return err
	}
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("send the workload: %w", err)
	}
	if err := r.hist.close(); err != nil {
		return err
	}
	r.logf("sent %d messages (%d copies); settling", r.rep.Sent, r.rep.Published)
	return nil
}

// failoversDue reports whether a failover is in progress, or some kind
// has not failed over yet: a failover run lasts until each kind has, even
// past its Duration (a fence alone waits out Patroni's ttl).
func (r *driver) failoversDue(f *faultPlan) bool {
	return r.ha != nil && (f.failingOver || len(r.failovers) < len(r.ha.kinds))
}

// failedOver records a failover that ended and schedules the next.
func (r *driver) failedOver(f *faultPlan, s *sender, fo Failover) {
	f.failingOver, f.fencing = false, false
	s.count("failovers ("+fo.Kind+")", 1)
	r.failovers = append(r.failovers, fo)
	f.nextFailover = time.Now().Add(failoverGap)
	if fo.Problem != "" {
		r.logf("failover %s: %s", fo.Kind, fo.Problem)
	}
}

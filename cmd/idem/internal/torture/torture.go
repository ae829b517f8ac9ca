// Package torture is the harness of `idem torture`: it runs worker
// processes of the idem binary on one store, drives a workload of many
// sagas through them while injecting faults on a schedule drawn from a
// seed, records every send in an append-only history, and after the run
// settles checks the history against the database (see Check).
package torture

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
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
	// FaultFailover fails the PostgreSQL primary over, several times a
	// run, rotating among FailoverKinds (needs Patroni and a store URL on
	// its cluster; failover.go).
	FaultFailover = "failover"
)

// TransportEmbedded is the Options.Transport that makes the driver start
// one nats-server in its own process, with JetStream files under the run's
// directory, and give its URL to the publishers and workers.
const TransportEmbedded = "nats-embedded"

// TransportCluster is the Options.Transport that makes the driver start a
// three-node JetStream cluster in its own process (natsembed.Cluster),
// with streams of three replicas; the broker-restart fault kills the node
// that leads the run's stream, then another, each brought back after a
// while.
const TransportCluster = "nats-cluster"

// AllFaults is the default fault mix.
var AllFaults = []string{FaultDuplicates, FaultKill, FaultCommitKill, FaultUoWKill, FaultStall, FaultStaleTimer, FaultBadInput, FaultPGRestart, FaultBrokerRestart, FaultFailover}

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
	// Patroni is the comma-separated REST API URLs of the Patroni cluster
	// that Store's URL names (multi-host, target_session_attrs=read-write),
	// for FaultFailover. The driver must run on the cluster's host: it
	// finds the postmaster and the agents by their listening ports.
	Patroni string
	// FailoverKinds are the failover kinds the fault rotates among (nil:
	// FailoverKinds).
	FailoverKinds []string
	// Dir holds the history, the fault log and the SQLite file. Empty
	// means a temporary directory, removed after a passing run.
	Dir string
	// Break names a deliberate breakage (BreakSkipInbox,
	// BreakAckBeforeCommit, BreakNoAdmission with Limits,
	// BreakRollDeadLetter with Roll), to show the checker fails.
	Break string
	// Limits runs the limits mode (limits.go): the workers declare a
	// concurrency cap of 2 on a resource two message types share, a rate
	// limit of 20/s with a burst of 5 and a cap of 8 per tenant; the
	// driver's messages carry one of two tenants, one flooding; and the
	// checker also checks the limits (flowcheck.go): on the store's own
	// queue, where the engine admits inside its receive, and beside a
	// broker (Transport), where it admits through the store after it
	// receives.
	Limits bool
	// FairnessBound, with Limits, is the longest a tenant's message may
	// wait for its admission (the tenant-starved invariant); 0 does not
	// check it. Under the queue's plain FIFO order a flooding tenant can
	// delay the other one legitimately, so it is off unless the engine
	// orders admission fairly: the workers do on the store's own queue,
	// and it is refused with a Transport.
	FairnessBound time.Duration
	// Roll runs the roll mode (roll.go): a rolling deploy of the workers
	// from definition A of the sagas to definition B, which A cannot
	// serve, from a third of Duration to two thirds; the checker also
	// requires that nothing was dead-lettered for a reason the deploy
	// caused, that the roll completed, and that A workers gave messages
	// back for sagas B wrote (the fleet really was mixed).
	Roll bool
	// OpenTransport opens the broker of Transport, in the driver (its
	// publishers and backlog counter); the worker processes open theirs
	// with the opener they pass to RunWorkerFromEnv. Required with a
	// Transport.
	OpenTransport TransportOpener
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
	// Flow sums up the limits of a limits run; nil otherwise.
	Flow *FlowSummary
	// Roll sums up the rolling deploy of a roll run; nil otherwise.
	Roll *RollSummary
	// Failover sums up the failovers of a failover run; nil otherwise.
	Failover *FailoverSummary
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
	if r.Flow != nil {
		r.Flow.Print(w)
	}
	if r.Roll != nil {
		r.Roll.Print(w)
	}
	if r.Failover != nil {
		r.Failover.Print(w)
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
		if r.Flow != nil {
			fmt.Fprintln(w, "PASS: no cap or rate exceeded, no slot leaked")
		}
		if r.Roll != nil {
			fmt.Fprintln(w, "PASS: rolled from definition A to B with A and B side by side, nothing dead-lettered by the deploy")
		}
		if r.Failover != nil {
			fmt.Fprintf(w, "PASS: %d failovers, each followed by a commit on the new primary\n", len(r.Failover.Failovers))
		}
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
	case o.Transport != "" && o.OpenTransport == nil:
		return fmt.Errorf("--transport %s: no broker transport is linked into this binary (torture.Options.OpenTransport is nil)", redactURL(o.Transport))
	case o.FairnessBound < 0 || o.FairnessBound > 0 && !o.Limits:
		return fmt.Errorf("--fairness-bound %s: give a positive bound, with --limits", o.FairnessBound)
	case o.FairnessBound > 0 && o.Transport != "":
		return fmt.Errorf("--fairness-bound with --transport %s: beside a broker the engine admits in the broker's order (it refuses Config.FairShare), so no tenant's wait is bounded; drop --fairness-bound, or --transport to run on the store's own queue", redactURL(o.Transport))
	case o.Break == BreakNoAdmission && !o.Limits:
		return fmt.Errorf("breakage %s needs --limits", o.Break)
	case o.Break == BreakRollDeadLetter && !o.Roll:
		return fmt.Errorf("breakage %s needs --roll", o.Break)
	case o.Roll && o.Workers < 2:
		return fmt.Errorf("--roll with --workers %d: a rolling deploy needs at least 2 workers, so that A and B run side by side", o.Workers)
	case o.Patroni != "" && !isPostgres(o.Store):
		return ErrNoFailover
	case o.Break != "" && o.Break != BreakSkipInbox && o.Break != BreakAckBeforeCommit && o.Break != BreakNoAdmission && o.Break != BreakRollDeadLetter:
		return fmt.Errorf("unknown breakage %q", o.Break)
	}
	for _, f := range o.Faults {
		if !slices.Contains(AllFaults, f) {
			return fmt.Errorf("unknown fault %q: known faults are %s", f, strings.Join(AllFaults, ","))
		}
	}
	for _, k := range o.FailoverKinds {
		if !slices.Contains(FailoverKinds, k) {
			return fmt.Errorf("unknown failover kind %q: known kinds are %s", k, strings.Join(FailoverKinds, ","))
		}
	}
	return nil
}

func (o *Options) has(f string) bool { return slices.Contains(o.Faults, f) }

// Run drives one torture run and checks it. The error is for a run that
// could not be carried out; a run that found violations returns a report
// whose Pass is false.
//
// A run has four phases: setup (open the backends, start the workers),
// drive (send the workload and inject faults for Duration), settle (wait
// until nothing is in flight) and report (check the history).
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.validate(); err != nil {
		return nil, err
	}
	r, err := setup(ctx, o)
	defer r.close()
	if err != nil {
		return nil, err
	}
	if err := r.drive(ctx); err != nil {
		return nil, err
	}
	if err := r.settle(ctx); err != nil {
		return nil, err
	}
	return r.report(ctx)
}

// driver is one torture run: what setup opened, which the other phases use.
// Only the driver's goroutine uses it, except for the counts the sender
// updates under sender.mu.
type driver struct {
	o     Options
	rep   *Report
	start time.Time
	dir   string
	temp  bool // dir is a temporary directory, removed after a passing run
	// storeSpec is the store as the workers open it (sqlite: the file);
	// schema is the run's PostgreSQL schema, empty on SQLite.
	storeSpec, schema string
	// brokerSpec is the broker's URL (the embedded server's, if any).
	brokerSpec string
	bo         BrokerOptions
	nats       embeddedBroker
	logger     *slog.Logger
	rng        *rand.Rand // the fault schedule's draws
	// pubs are the two publishers; pubs[0] comes with st.
	pubs   []transport.Transport
	st     store.Store
	broker transport.PendingCounter // nil on the store's own queue
	db     *sql.DB
	hist   *history
	sched  store.Scheduler
	copier *tickCopier
	// faultLog is where the workers note the faults they inflict.
	faultLog string
	workers  *pool
	// roll is the rolling deploy of a roll run; nil otherwise.
	roll *roller
	// ha drives the failover fault; nil when the run has none.
	// failovers are those it caused, in order.
	ha        *haFaults
	failovers []Failover
	// exits are when the driver saw each worker generation exit.
	exits   map[int]time.Time
	closers []func() // run by close, last first
}

// logf writes one progress line, if the run has a log.
func (r *driver) logf(format string, args ...any) {
	if r.o.Log != nil {
		fmt.Fprintf(r.o.Log, "torture: "+format+"\n", args...)
	}
}

// deferClose adds fn to what close runs.
func (r *driver) deferClose(fn func()) { r.closers = append(r.closers, fn) }

// close releases what setup opened, in the reverse order.
func (r *driver) close() {
	for i := len(r.closers) - 1; i >= 0; i-- {
		r.closers[i]()
	}
	r.closers = nil
}

// setup opens the run's directory, broker, publishers, database and
// history, and starts the workers. The driver it returns is never nil, so
// that its close runs even when setup failed.
func setup(ctx context.Context, o Options) (*driver, error) {
	r := &driver{o: o, start: time.Now(), logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		rng: rand.New(rand.NewPCG(o.Seed, 0x7047))}
	if err := r.workDir(); err != nil {
		return r, err
	}
	if err := r.startBroker(ctx); err != nil {
		return r, err
	}
	if err := r.openBackends(ctx); err != nil {
		return r, err
	}
	if err := r.openHistory(ctx); err != nil {
		return r, err
	}
	if err := r.startFailovers(ctx); err != nil {
		return r, err
	}
	if o.Roll {
		r.roll = newRoller(r.start, o.Duration, o.Workers)
	}
	r.workers = newPool(r)
	r.deferClose(r.workers.kill)
	return r, r.workers.startAll()
}

// workDir creates the run's directory and the report, and names the store.
func (r *driver) workDir() error {
	o := &r.o
	r.dir = o.Dir
	if r.dir == "" {
		d, err := os.MkdirTemp("", "idem-torture-")
		if err != nil {
			return fmt.Errorf("create a work directory: %w", err)
		}
		r.dir, r.temp = d, true
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", r.dir, err)
	}
	r.rep = &Report{Store: redactURL(o.Store), Transport: redactURL(o.Transport), Seed: o.Seed, Workers: o.Workers, Dir: r.dir, Faults: map[string]int{}}
	if r.rep.Transport == "" {
		r.rep.Transport = "the store's own queue"
	}
	r.storeSpec = o.Store
	if o.Store == "sqlite" {
		r.storeSpec = filepath.Join(r.dir, "idem.db")
	} else {
		r.schema = fmt.Sprintf("torture_%d_%d", o.Seed, time.Now().UnixNano()%1e9)
		r.rep.Store = "postgres (schema " + r.schema + ")"
	}
	return nil
}

// startBroker gives a broker the run's own namespace, so nothing another
// run left is counted or delivered; nats-embedded is one server in this
// process that every publisher and worker connects to.
func (r *driver) startBroker(ctx context.Context) error {
	o := &r.o
	r.brokerSpec = o.Transport
	r.bo = BrokerOptions{Lease: workerLease}
	if o.Transport != "" {
		r.bo.Namespace = fmt.Sprintf("torture_%d_%d", o.Seed, time.Now().UnixNano()%1e9)
	}
	var err error
	switch o.Transport {
	case TransportEmbedded:
		r.nats, err = startNATS(ctx, filepath.Join(r.dir, "nats"))
	case TransportCluster:
		r.bo.Replicas = 3
		r.nats, err = startCluster(ctx, filepath.Join(r.dir, "nats"), r.bo.Namespace)
	}
	if err != nil {
		return err
	}
	if r.nats != nil {
		r.deferClose(r.nats.stop)
		r.brokerSpec = r.nats.URL()
		r.rep.Transport = r.nats.describe()
	}
	if o.Transport != "" {
		r.rep.Transport += ", namespace " + r.bo.Namespace
	}
	return nil
}

// openBackends opens two publishers, on their own connections (copies of
// one message go through both at once), the broker's backlog counter and
// the database the checker reads.
func (r *driver) openBackends(ctx context.Context) error {
	for i := range 2 {
		s, tr, closeFn, err := retryOpen(ctx, func() (store.Store, transport.Transport, func(), error) {
			b := &backend{store: r.storeSpec, schema: r.schema, transport: r.brokerSpec, bo: r.bo, open: r.o.OpenTransport}
			return b.openWith(ctx, r.logger)
		})
		if err != nil {
			return err
		}
		r.deferClose(closeFn)
		if i == 0 {
			r.st = s
		}
		r.pubs = append(r.pubs, tr)
	}
	// natsjs counts the backlog across every process; rabbitmq counts the
	// ready messages of every queue, and only its own unacknowledged
	// deliveries (AMQP 0-9-1 cannot see other connections'). The settle
	// rule (docs/reliability.md) is sound with either.
	if r.o.Transport != "" {
		var ok bool
		if r.broker, ok = r.pubs[0].(transport.PendingCounter); !ok {
			return fmt.Errorf("--transport %s: the transport (%T) cannot count its backlog (no Pending method), so the run could not tell when it settled", r.o.Transport, r.pubs[0])
		}
	}
	db, err := openDB(r.storeSpec, r.schema)
	if err != nil {
		return err
	}
	r.db = db
	r.deferClose(func() { db.Close() })
	return nil
}

// openHistory creates the history and installs the schedules' audit:
// they are audited from their creation by the first worker.
func (r *driver) openHistory(ctx context.Context) error {
	hist, err := createHistory(filepath.Join(r.dir, "history.jsonl"))
	if err != nil {
		return err
	}
	r.hist = hist
	if err := installScheduleAudit(ctx, r.storeSpec, r.schema); err != nil {
		return err
	}
	if err := hist.append(scheduleRecords(runSchedules)...); err != nil {
		return err
	}
	r.sched = r.st.(store.Scheduler) // both SQL stores are
	r.copier = &tickCopier{st: r.sched, pub: r.pubs[1], db: r.db}
	r.faultLog = filepath.Join(r.dir, "faults.log")
	return nil
}

// report counts the workers' own faults, checks the history against the
// database, and removes what a passing run leaves behind.
func (r *driver) report(ctx context.Context) (*Report, error) {
	rep := r.rep
	r.countWorkerFaults()
	r.rollReport()
	if rep.Kills < r.o.MinKills {
		rep.Problems = append(rep.Problems, fmt.Sprintf("only %d worker kills, want at least %d (--kills): run longer", rep.Kills, r.o.MinKills))
	}
	records, err := ReadHistory(filepath.Join(r.dir, "history.jsonl"))
	if err != nil {
		return nil, err
	}
	if rep.Violations, rep.Ticks, err = check(ctx, records, r.st, r.db); err != nil {
		return nil, err
	}
	if err := r.failoverReport(ctx); err != nil {
		return nil, err
	}
	if r.o.Limits {
		vs, sum, err := r.flowCheck(ctx, records)
		if err != nil {
			return nil, err
		}
		rep.Violations, rep.Flow = append(rep.Violations, vs...), sum
	}
	if err := r.db.QueryRowContext(ctx, `SELECT count(*) FROM idem_journal`).Scan(&rep.Journal); err != nil {
		return nil, fmt.Errorf("count the journal: %w", err)
	}
	rep.Elapsed = time.Since(r.start)
	r.cleanUp(ctx)
	return rep, nil
}

// countWorkerFaults counts the faults the workers noted in the fault log.
func (r *driver) countWorkerFaults() {
	b, err := os.ReadFile(r.faultLog)
	if err != nil {
		return
	}
	for _, l := range strings.Fields(string(b)) {
		switch l {
		case faultKillAfterCommit:
			r.rep.Faults["SIGKILL after commit (self)"]++
		case faultKillInUoW:
			r.rep.Faults["SIGKILL before commit (self)"]++
		case faultStall:
			r.rep.Faults["lease expiry (stalled worker)"]++
		case faultRenewedStall:
			r.rep.Faults["stall kept by lease renewal"]++
		case faultKillInSchedule:
			r.rep.Faults["SIGKILL in schedule pass"]++
		case faultKillAfterFire:
			r.rep.Faults["SIGKILL after schedule fire"]++
		case faultRollGiveBack:
			r.rep.Faults[rollGiveBackFault]++
		}
	}
}

// cleanUp removes a passing run's broker namespace, directory and schema.
func (r *driver) cleanUp(ctx context.Context) {
	pass := r.rep.Pass()
	if d, ok := r.pubs[0].(NamespaceDeleter); ok && pass && r.nats == nil {
		if err := d.DeleteNamespace(ctx); err != nil {
			r.logf("delete the broker namespace %s: %v", r.bo.Namespace, err)
		}
	}
	if r.nats != nil {
		r.nats.stop() // before its files go
	}
	if r.temp && pass {
		os.RemoveAll(r.dir)
		r.rep.Dir += " (removed: the run passed)"
	}
	if r.schema != "" && pass {
		if _, err := r.db.ExecContext(ctx, "DROP SCHEMA "+pgx.Identifier{r.schema}.Sanitize()+" CASCADE"); err != nil {
			r.logf("drop schema %s: %v", r.schema, err)
		}
	}
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

// directURLRE finds pgstore's idem_direct_url query parameter: a whole
// URL, escaped, whose password url.Redacted cannot see.
var directURLRE = regexp.MustCompile(pgstore.DirectURLParam + `=[^&\s]*`)

// redactURL hides the password of a URL (a broker's), for reports.
func redactURL(raw string) string {
	raw = directURLRE.ReplaceAllString(raw, pgstore.DirectURLParam+"=***")
	var out []string
	for _, one := range strings.Split(raw, ",") {
		if u, err := url.Parse(one); err == nil && u.User != nil {
			one = u.Redacted()
		}
		out = append(out, one)
	}
	return strings.Join(out, ",")
}

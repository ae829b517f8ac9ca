package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// ReplicaOptions configure a replica sweep (idem bench --replicas): for
// each transport and each replica count N, N engine processes (replicas)
// share one PostgreSQL database and consume one workload, first drained
// from a pre-filled queue (throughput), then published at a fixed pace
// (latency). Every replica runs the zero idem.Config with pgstore's default
// pool, as a deployment that sets nothing would.
type ReplicaOptions struct {
	// URL is the PostgreSQL connection string; SchemaPrefix starts the
	// names of the throwaway schemas.
	URL, SchemaPrefix string
	// AllowUnsafeCommit accepts a server with synchronous_commit=off.
	AllowUnsafeCommit bool
	// Replicas are the replica counts to run, in order.
	Replicas []int
	// Messages, Keys, Dup and Seed make the workload (NewWorkload).
	Messages, Keys int
	Dup            float64
	Seed           uint64
	// LatencyLoad is the latency phase's rate as a fraction of the first
	// replica count's throughput on the same transport: one rate for every
	// count, so that their p99 compare.
	LatencyLoad float64
	// LatencyDuration and LatencyWarmup are as in Options.
	LatencyDuration, LatencyWarmup time.Duration
	// Timeout bounds each phase.
	Timeout time.Duration
	// KeepSchemas keeps the schemas instead of dropping them.
	KeepSchemas bool
	// Brokers each add a sweep with the broker as transport after the one
	// on the store's queue.
	Brokers []ReplicaBroker
	// Command returns the command that runs one replica
	// (RunReplicaWorker) with the given arguments, which the caller's
	// worker command must accept: --store, --schema, --messages, --keys,
	// --dup, --seed, --prefix, and --transport and --allow-unsafe-commit
	// when set.
	Command func(args []string) *exec.Cmd
	// Log receives progress lines and the replicas' errors. Nil discards
	// them.
	Log io.Writer
}

// ReplicaBroker is a broker of a replica sweep.
type ReplicaBroker struct {
	// Broker opens the sweep's own transport, to publish the workload
	// and to remove the namespace afterwards.
	Broker
	// WorkerSpec is the --transport argument of the replicas: a spec the
	// worker command opens on the same broker (a nats:// URL for an
	// embedded server the sweep runs).
	WorkerSpec string
}

// Validate reports the first bad option, naming its flag.
func (o *ReplicaOptions) Validate() error {
	switch {
	case len(o.Replicas) == 0:
		return errors.New("--replicas needs at least one replica count")
	case o.Messages < 1:
		return fmt.Errorf("--messages must be at least 1, got %d", o.Messages)
	case o.Keys < 1:
		return fmt.Errorf("--keys must be at least 1, got %d", o.Keys)
	case o.Dup < 0 || o.Dup >= 1:
		return fmt.Errorf("--dup must be in [0, 1), got %v", o.Dup)
	case o.LatencyLoad < 0 || o.LatencyLoad > 1:
		return fmt.Errorf("--latency-load must be in [0, 1] (0 skips the latency phase), got %v", o.LatencyLoad)
	case o.LatencyDuration <= 0 || o.LatencyWarmup < 0:
		return errors.New("--latency-duration must be positive and --latency-warmup not negative")
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout must be positive, got %s", o.Timeout)
	case o.Command == nil:
		return errors.New("no command to start replicas with")
	}
	for _, n := range o.Replicas {
		if n < 1 || n > maxReplicas {
			return fmt.Errorf("--replicas: %d is not between 1 and %d", n, maxReplicas)
		}
	}
	return nil
}

// maxReplicas bounds a replica count: each replica's pool may hold 16
// connections.
const maxReplicas = 64

// ReplicaReport is the result of a replica sweep.
type ReplicaReport struct {
	Date       string  `json:"date"`
	Machine    string  `json:"machine"`
	Server     string  `json:"server"`
	Go         string  `json:"go"`
	LoadBefore float64 `json:"load_before"`
	LoadAfter  float64 `json:"load_after"`
	Messages   int     `json:"messages"`
	Distinct   int     `json:"distinct"`
	Duplicates int     `json:"duplicates"`
	Keys       int     `json:"keys"`
	Seed       uint64  `json:"seed"`
	// MaxConnections is the server's max_connections.
	MaxConnections int          `json:"max_connections"`
	Runs           []ReplicaRun `json:"runs"`
	ExactlyOnce    bool         `json:"exactly_once"`
}

// ReplicaRun is one replica count on one transport.
type ReplicaRun struct {
	// Transport is empty for the store's queue, else the broker's name.
	Transport string `json:"transport,omitempty"`
	Replicas  int    `json:"replicas"`
	// PoolSize is each replica's pool (MaxConns).
	PoolSize int `json:"pool_size"`

	// The throughput phase: the queue (or the broker) holds the whole
	// stream when the replicas start; it ends at the last first commit.
	Seconds          float64 `json:"seconds"`
	DeliveriesPerSec float64 `json:"deliveries_per_sec"`
	// Relative is DeliveriesPerSec over the first replica count's on the
	// same transport.
	Relative float64 `json:"relative"`
	// PerReplica is the messages each replica applied.
	PerReplica  []int64 `json:"applied_per_replica"`
	Applied     int64   `json:"applied"`
	Duplicates  int64   `json:"duplicates_skipped"`
	Conflicts   int64   `json:"conflicts"`
	Retries     int64   `json:"retries"`
	LeaseLost   int64   `json:"lease_lost"`
	Redelivered int64   `json:"redelivered"`
	ClaimedInTx int64   `json:"claimed_in_tx"`
	UnitsOfWork int64   `json:"units_of_work"`
	// Receives is the replicas' receives and claims (empty ones
	// included); Received the deliveries they returned, redeliveries
	// included.
	Receives int64 `json:"receives"`
	Received int64 `json:"received"`
	// RoundTrips and Statements per delivery, counted by the replicas'
	// pgx tracers (the sweep's own queries are not in them).
	RoundTrips float64 `json:"round_trips_per_delivery"`
	Statements float64 `json:"statements_per_delivery"`
	// Transactions per delivery: the database's xact_commit plus
	// xact_rollback delta, less the sweep's own (the whole database's:
	// run on a server with nothing else to do).
	Transactions float64 `json:"transactions_per_delivery"`
	// WALBytes per delivery (pg_stat_wal, the whole server's).
	WALBytes float64 `json:"wal_bytes_per_delivery"`
	// EngineCPUUs is the replicas' processes' CPU per delivery; ServerUs
	// the PostgreSQL server's processes', SweepUs this process's (an
	// embedded broker runs here).
	EngineCPUUs float64 `json:"engine_cpu_us_per_delivery"`
	ServerCPUUs float64 `json:"server_cpu_us_per_delivery"`
	SweepCPUUs  float64 `json:"sweep_cpu_us_per_delivery"`
	ServerCPU   string  `json:"server_cpu"`
	// Connections is the most client backends on the database seen
	// during the phase; LockWaits the most ungranted locks.
	Connections int `json:"connections_peak"`
	LockWaits   int `json:"lock_waits_peak"`
	// WaitEvents counts, over the phase's samples (every
	// sampleEvery), the database's active backends by wait event
	// ("CPU" when not waiting).
	WaitEvents map[string]int `json:"wait_events"`
	Samples    int            `json:"samples"`

	// The latency phase: the same replicas, a producer paced at
	// LatencyRate; publish to commit, after the warm-up.
	LatencyRate      float64 `json:"latency_rate"`
	LatencyMessages  int     `json:"latency_messages"`
	P50Ms            float64 `json:"p50_ms"`
	P99Ms            float64 `json:"p99_ms"`
	LatencyConflicts int64   `json:"latency_conflicts"`

	ExactlyOnce bool     `json:"exactly_once"`
	Problems    []string `json:"problems,omitempty"`
}

// sampleEvery is how often the sweep looks at the server during a phase.
const sampleEvery = 100 * time.Millisecond

// RunReplicas runs the sweep and returns its report. An error means a
// phase could not complete; a phase that completed but broke exactly-once
// is reported with ExactlyOnce false.
func RunReplicas(ctx context.Context, o ReplicaOptions) (*ReplicaReport, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.SchemaPrefix == "" {
		o.SchemaPrefix = "idem"
	}
	s := &sweep{o: o, id: randHex(3), log: cmpWriter(o.Log)}
	s.log = &lockedWriter{w: s.log}
	w := NewWorkload(o.Messages, o.Keys, o.Dup, o.Seed, "m-")
	rep := &ReplicaReport{
		Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), Go: runtime.Version(), LoadBefore: loadAverage(),
		Messages: o.Messages, Distinct: w.Distinct, Duplicates: w.Duplicates(), Keys: o.Keys, Seed: o.Seed, ExactlyOnce: true,
	}
	transports := []*ReplicaBroker{nil}
	for i := range o.Brokers {
		transports = append(transports, &o.Brokers[i])
	}
	for _, b := range transports {
		var first float64
		for _, n := range o.Replicas {
			run := ReplicaRun{Replicas: n}
			if b != nil {
				run.Transport = b.Name
			}
			if err := s.throughput(ctx, &run, b, w, rep); err != nil {
				return nil, fmt.Errorf("%s, %d replicas: %w", transportName(EngineRun{Transport: run.Transport}), n, err)
			}
			if first == 0 {
				first = run.DeliveriesPerSec
			}
			run.Relative = ratio(run.DeliveriesPerSec, first)
			if o.LatencyLoad > 0 {
				if err := s.latency(ctx, &run, b, o.LatencyLoad*first); err != nil {
					return nil, fmt.Errorf("%s, %d replicas, latency phase: %w", transportName(EngineRun{Transport: run.Transport}), n, err)
				}
			}
			run.ExactlyOnce = len(run.Problems) == 0
			rep.ExactlyOnce = rep.ExactlyOnce && run.ExactlyOnce
			rep.Runs = append(rep.Runs, run)
			s.progress("%s, %d replicas: %.0f deliveries/s (%.2f of %d), p99 %.1f ms, %d conflicts, %d leases lost, %.3f round trips and %.3f transactions per delivery, %d connections",
				transportName(EngineRun{Transport: run.Transport}), n, run.DeliveriesPerSec, run.Relative, o.Replicas[0], run.P99Ms, run.Conflicts, run.LeaseLost, run.RoundTrips, run.Transactions, run.Connections)
		}
	}
	rep.LoadAfter = loadAverage()
	return rep, nil
}

// sweep is the state of RunReplicas.
type sweep struct {
	o   ReplicaOptions
	id  string
	n   int // schemas made
	log io.Writer
}

func (s *sweep) progress(format string, args ...any) {
	fmt.Fprintf(s.log, "idem bench: "+format+"\n", args...)
}

// phase is one phase's schema, store and publisher.
type phase struct {
	st     *pgstore.Store
	pub    transport.Publisher
	schema string
	w      *Workload
	prefix string
	seed   uint64
	close  func()
}

// open makes a fresh, migrated schema for a phase of w (made with prefix
// and seed), diverts the saga's emitted messages from its queue, and opens
// the broker's namespace of the same name.
func (s *sweep) open(ctx context.Context, b *ReplicaBroker, w *Workload, prefix string, seed uint64) (*phase, error) {
	s.n++
	schema := fmt.Sprintf("%s_reps_%s_%d", s.o.SchemaPrefix, s.id, s.n)
	st, err := pgstore.Open(ctx, s.o.URL, &pgstore.Config{
		Schema: schema, Migrate: true, MaxConns: 4, AllowUnsafeCommit: s.o.AllowUnsafeCommit,
		Logger: slog.New(slog.NewTextHandler(s.log, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return nil, err
	}
	p := &phase{st: st, pub: st, schema: schema, w: w, prefix: prefix, seed: seed}
	p.close = func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		if !s.o.KeepSchemas {
			if _, err := st.Pool().Exec(dctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
				s.progress("could not drop schema %s: %v", schema, err)
			}
		}
		_ = st.Close()
	}
	if _, err := st.Pool().Exec(ctx, divertEmittedSQL); err != nil {
		p.close()
		return nil, fmt.Errorf("divert emitted messages: %w", err)
	}
	if b != nil {
		bt, err := b.New(ctx, schema, []string{incrementType})
		if err != nil {
			p.close()
			return nil, fmt.Errorf("open transport %s: %w", b.Name, err)
		}
		prev := p.close
		p.pub, p.close = bt, func() { _ = bt.Close(); prev() }
	}
	return p, nil
}

// args are the replicas' arguments for phase p.
func (s *sweep) args(p *phase, b *ReplicaBroker) []string {
	a := []string{"--store", s.o.URL, "--schema", p.schema, "--messages", strconv.Itoa(len(p.w.Deliveries)),
		"--keys", strconv.Itoa(s.o.Keys), "--dup", strconv.FormatFloat(s.o.Dup, 'g', -1, 64),
		"--seed", strconv.FormatUint(p.seed, 10), "--prefix", p.prefix}
	if b != nil {
		a = append(a, "--transport", b.WorkerSpec)
	}
	if s.o.AllowUnsafeCommit {
		a = append(a, "--allow-unsafe-commit")
	}
	return a
}

// throughput runs the throughput phase of run: the stream pre-published,
// then run.Replicas replicas started at once, until every delivery is
// settled. On the store's queue the stream is hidden until the replicas
// have started and settled their shares of the queue (settle): the phase
// measures a fleet draining a backlog, not its start.
func (s *sweep) throughput(ctx context.Context, run *ReplicaRun, b *ReplicaBroker, w *Workload, rep *ReplicaReport) error {
	p, err := s.open(ctx, b, w, "m-", s.o.Seed)
	if err != nil {
		return err
	}
	defer p.close()
	if rep.Server == "" {
		if err := p.st.Pool().QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('max_connections')::int`).Scan(&rep.Server, &rep.MaxConnections); err != nil {
			return err
		}
	}
	for chunk := range slices.Chunk(w.Envelopes(time.Now()), 1000) {
		if err := p.pub.Publish(ctx, chunk); err != nil {
			return fmt.Errorf("pre-publish: %w", err)
		}
	}
	if _, err := p.st.Pool().Exec(ctx, `ANALYZE idem_queue`); err != nil {
		return err
	}
	// On the store's queue the stream waits hidden while the replicas
	// start and settle their shares, then shows at once.
	hidden := b == nil
	if hidden {
		if _, err := p.st.Pool().Exec(ctx, `UPDATE idem_queue SET visible_at = 'infinity'`); err != nil {
			return fmt.Errorf("hide the stream: %w", err)
		}
	}
	f, err := s.startFleet(ctx, run.Replicas, s.args(p, b))
	if err != nil {
		return err
	}
	defer f.kill()
	if hidden {
		if err := f.start(); err != nil {
			return err
		}
		if err := s.settle(ctx, p, run.Replicas); err != nil {
			return err
		}
	}
	m, err := startServerMeter(ctx, p.st.Pool())
	if err != nil {
		return err
	}
	engine0 := f.cpu()
	start := time.Now()
	own := int64(0) // the sweep's transactions in the window, besides its polls
	if hidden {
		own = 2
		if _, err := p.st.Pool().Exec(ctx, `UPDATE idem_queue SET visible_at = now()`); err != nil {
			return fmt.Errorf("show the stream: %w", err)
		}
		if _, err := p.st.Pool().Exec(ctx, `SELECT pg_notify('idem_queue', $1::text)`, p.schema); err != nil {
			return fmt.Errorf("wake the replicas: %w", err)
		}
	} else if err := f.start(); err != nil {
		return err
	}
	smp, err := s.waitSettled(ctx, p, b != nil, run)
	if err != nil {
		return err
	}
	smp.queries += own
	run.EngineCPUUs = float64((f.cpu() - engine0).Microseconds()) / float64(len(w.Deliveries))
	cpu := m.cpu.finish(len(w.Deliveries))
	run.ServerCPUUs, run.SweepCPUUs, run.ServerCPU = cpu.ServerUs, cpu.ClientUs, cpu.Server
	snaps, err := f.stop(ctx)
	if err != nil {
		return err
	}
	if err := m.finish(ctx, p.st.Pool(), run, smp.queries, len(w.Deliveries)); err != nil {
		return err
	}
	done, _ := merge(snaps, len(w.Deliveries))
	run.Seconds = time.Unix(0, done).Sub(start).Seconds()
	run.DeliveriesPerSec = float64(len(w.Deliveries)) / run.Seconds
	s.total(run, snaps, len(w.Deliveries))
	return s.check(ctx, p, run, snaps, "")
}

// total adds the replicas' counters to run.
func (s *sweep) total(run *ReplicaRun, snaps []*replicaSnapshot, deliveries int) {
	var trips, stmts int64
	for _, x := range snaps {
		run.PerReplica = append(run.PerReplica, x.Applied)
		run.Applied += x.Applied
		run.Duplicates += x.Duplicates
		run.Conflicts += x.Conflicts
		run.Retries += x.Retries
		run.LeaseLost += x.LeaseLost
		run.Redelivered += x.Redelivered
		run.ClaimedInTx += x.ClaimedInTx
		run.UnitsOfWork += x.UnitsOfWork
		run.Receives += x.Receives
		run.Received += x.Received
		run.PoolSize = x.PoolSize
		trips += x.RoundTrips
		stmts += x.Statements
	}
	run.RoundTrips = float64(trips) / float64(deliveries)
	run.Statements = float64(stmts) / float64(deliveries)
}

// check verifies exactly-once after a phase: the saga's counters, the
// inbox and the emitted messages, and that the replicas' counters add up.
func (s *sweep) check(ctx context.Context, p *phase, run *ReplicaRun, snaps []*replicaSnapshot, label string) error {
	emitted := "bench_emitted"
	if run.Transport != "" {
		emitted = "idem_outbox"
	}
	problems, err := verify(ctx, p.st.Pool(), p.w, emitted)
	if err != nil {
		return err
	}
	var applied, dups int64
	for _, x := range snaps {
		applied += x.Applied
		dups += x.Duplicates
	}
	want := int64(p.w.Duplicates())
	if applied != int64(p.w.Distinct) || dups > want || (run.Transport == "" && dups != want) {
		problems = append(problems, fmt.Sprintf("the replicas applied %d and skipped %d duplicates, want %d and %d (a broker may drop some)", applied, dups, p.w.Distinct, want))
	}
	for _, pr := range problems {
		run.Problems = append(run.Problems, label+pr)
	}
	return nil
}

// merge returns the last of the deliveries' first commits over the
// replicas' snapshots, and the first commit of each delivery (Unix
// nanoseconds by stream position).
func merge(snaps []*replicaSnapshot, n int) (last int64, first []int64) {
	first = make([]int64, n)
	for _, x := range snaps {
		for i, c := range x.Committed {
			if i < n && c != 0 && (first[i] == 0 || c < first[i]) {
				first[i] = c
			}
		}
	}
	for _, c := range first {
		last = max(last, c)
	}
	return last, first
}

// lockedWriter serialises writes from several goroutines (the replicas'
// stderr copiers and the sweep's progress lines).
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

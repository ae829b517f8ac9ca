// Package bench is `idem bench`: a counter saga driven through the engine on
// PostgreSQL (pgstore as store and queue), beside two baselines written as
// straight SQL over pgx on the same tables, all in one run so that results
// are read as ratios on a noisy machine.
//
// Every run gets a fresh schema, migrated at the start and dropped at the
// end. The workload is a seeded stream of Increment messages over a set of
// keys, a fraction of which are duplicates of earlier messages; every
// transition also emits one message (the outbox row). Each run checks
// exactly-once afterwards: every key's counter and version equal the number
// of distinct messages for it, and there is one inbox record (and one
// journal row, or outbox row) per distinct message.
package bench

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// Options configure a benchmark. They map one to one onto the flags of
// `idem bench`; Validate names the flag of a bad value.
type Options struct {
	// URL is the PostgreSQL connection string.
	URL string
	// SchemaPrefix starts the names of the throwaway schemas.
	SchemaPrefix string
	// JournalPayloadLimit is the engine's Config.JournalPayloadLimit: 0
	// the default, negative no payload, headers or diff in the journal.
	JournalPayloadLimit int
	// AllowUnsafeCommit accepts a server with synchronous_commit=off.
	AllowUnsafeCommit bool
	// Messages is the number of deliveries per run, duplicates included.
	Messages int
	// Keys is the number of counter sagas.
	Keys int
	// Dup is the fraction of deliveries that repeat an earlier message.
	Dup float64
	// Batches and Lanes are the engine configurations to run (every pair).
	Batches, Lanes []int
	// Consumers are the engine's Config.Consumers values to run (every
	// batch × lanes × consumers triple runs); empty means 1.
	Consumers []int
	// Partitioned sets Config.PartitionedReceive in every run on the
	// PostgreSQL queue but the defaults': each consumer then receives its
	// own partitions of the keys instead of taking turns on one stream.
	// The runs with a broker as transport always set it, so that their
	// consumers keep to their own keys (the workload gives every message
	// its key as CorrelationID).
	Partitioned bool
	// Claims are the ways the engine takes messages from the PostgreSQL
	// queue to run (each configuration once per way, one after the other):
	// ClaimLease and ClaimTx. Empty means ClaimTx only.
	Claims []string
	// LimitCap is the concurrency cap of ClaimLimit runs; 0 means
	// DefaultLimitCap.
	LimitCap int
	// Defaults adds, before the others, a run of the engine with the zero
	// Config (every default) and pgstore's default pool, for each
	// transport: what a user who sets nothing gets.
	Defaults bool
	// BaselineClients is the number of concurrent clients of the baselines.
	BaselineClients int
	// BaselineBatch is how many messages baseline (b) writes per
	// transaction.
	BaselineBatch int
	// LatencyLoad is the rate of the latency phase as a fraction of the
	// throughput phase's rate.
	LatencyLoad float64
	// LatencyDuration is how long the latency phase publishes and measures,
	// after LatencyWarmup.
	LatencyDuration time.Duration
	// LatencyWarmup is how long the latency phase publishes at its pace
	// before it measures (0: no warm-up).
	LatencyWarmup time.Duration
	// Seed makes the workload reproducible.
	Seed uint64
	// Timeout bounds each phase.
	Timeout time.Duration
	// KeepSchemas keeps the schemas for inspection instead of dropping them.
	KeepSchemas bool
	// Log receives progress lines and engine errors. Nil discards them.
	Log io.Writer
	// Brokers each add a run with a separate transport beside each
	// PostgreSQL-queue run.
	Brokers []Broker
	// Dedups are the engine's Config.Dedup modes to run (each
	// configuration once per mode). Empty means DedupRetention only. In a
	// DedupToken run the workload's sender mints a token per distinct
	// message before the measured phase, and the engine mints one per
	// emitted message inside its units of work.
	Dedups []idem.Dedup
	// Cost measures what each throughput phase asks of the database per
	// message (EngineRun.Cost), and runs every configuration on SQLite too
	// (Report.SQLite). See cost.go.
	Cost bool
	// Tracer, when set, adds a run with it as the engine's Config.Tracer
	// beside each run, to measure the cost of tracing. Traced runs are not
	// candidates for the report's target.
	Tracer idem.Tracer
	// Sagas, InboxRows and Finished preload the store of every engine run
	// (see Scale); each configuration runs once per Sagas value.
	Sagas, InboxRows []int
	Finished         int
}

// Ways the engine takes messages from the PostgreSQL queue (Options.Claims).
const (
	// ClaimLease hides the store's store.ClaimUnitOfWork from the engine:
	// every batch is leased by Receive (an UPDATE in a transaction of its
	// own) and deleted by the unit of work that applies it.
	ClaimLease = "lease"
	// ClaimTx lets the engine claim batches inside the unit of work that
	// applies them (DELETE … RETURNING) where it can: one lane per batch,
	// a consumer with its stream or partition to itself, and a backlog
	// (see claim.go in package idem). Consumers taking turns on one stream
	// lease whatever this says.
	ClaimTx = "tx"
	// ClaimLimit leases every batch as ClaimLease does, but through
	// flow-control admission (store.AdmittingQueue.ReceiveAdmitted): the
	// engine declares a concurrency cap of Options.LimitCap on the
	// workload's message type (Config.Limits), which binds only when it
	// is below the messages in flight. With the default cap it never
	// binds: the run measures what admission costs the happy path.
	ClaimLimit = "limit"
)

// DefaultLimitCap is Options.LimitCap's default: a cap no run reaches.
const DefaultLimitCap = 1_000_000

// Broker is a transport the benchmark runs the engine on, with PostgreSQL
// as the store only.
type Broker struct {
	// Name names the broker in the report.
	Name string
	// New returns a fresh transport on namespace ns that hands out only
	// the given message types.
	New func(ctx context.Context, ns string, types []string) (transport.Transport, error)
}

// broker returns the broker named name.
func (o *Options) broker(name string) *Broker {
	for i := range o.Brokers {
		if o.Brokers[i].Name == name {
			return &o.Brokers[i]
		}
	}
	return nil
}

// Validate reports the first bad option, naming its flag.
func (o *Options) Validate() error {
	switch {
	case o.Messages < 1:
		return fmt.Errorf("--messages must be at least 1, got %d", o.Messages)
	case o.Keys < 1:
		return fmt.Errorf("--keys must be at least 1, got %d", o.Keys)
	case o.Dup < 0 || o.Dup >= 1:
		return fmt.Errorf("--dup must be in [0, 1), got %v", o.Dup)
	case len(o.Batches) == 0:
		return errors.New("--batch needs at least one batch size")
	case len(o.Lanes) == 0:
		return errors.New("--lanes needs at least one lane count")
	case o.BaselineClients < 1:
		return fmt.Errorf("--baseline-clients must be at least 1, got %d", o.BaselineClients)
	case o.BaselineBatch < 1:
		return fmt.Errorf("--baseline-batch must be at least 1, got %d", o.BaselineBatch)
	case o.LatencyLoad < 0 || o.LatencyLoad > 1:
		return fmt.Errorf("--latency-load must be in [0, 1] (0 skips the latency phase), got %v", o.LatencyLoad)
	case o.LatencyDuration <= 0:
		return fmt.Errorf("--latency-duration must be positive, got %s", o.LatencyDuration)
	case o.LatencyWarmup < 0:
		return fmt.Errorf("--latency-warmup must not be negative, got %s", o.LatencyWarmup)
	case o.Timeout <= 0:
		return fmt.Errorf("--timeout must be positive, got %s", o.Timeout)
	}
	for _, b := range o.Batches {
		if b < 1 {
			return fmt.Errorf("--batch sizes must be at least 1, got %d", b)
		}
	}
	for _, l := range o.Lanes {
		if l < 1 {
			return fmt.Errorf("--lanes must be at least 1, got %d", l)
		}
	}
	for _, c := range o.Consumers {
		if c < 1 {
			return fmt.Errorf("--consumers must be at least 1, got %d", c)
		}
	}
	for _, c := range o.Claims {
		if c != ClaimLease && c != ClaimTx && c != ClaimLimit {
			return fmt.Errorf("--claim modes are %s, %s and %s, got %q", ClaimLease, ClaimTx, ClaimLimit, c)
		}
	}
	return o.validateScale()
}

// Report is the result of one benchmark run.
type Report struct {
	Date    string `json:"date"`
	Machine string `json:"machine"`
	Server  string `json:"server"`
	Go      string `json:"go"`
	// LoadBefore is the 1-minute load average when the run started: other
	// work on the machine skews the numbers.
	LoadBefore   float64     `json:"load_before"`
	Messages     int         `json:"messages"`
	Distinct     int         `json:"distinct"`
	Duplicates   int         `json:"duplicates"`
	Keys         int         `json:"keys"`
	Seed         uint64      `json:"seed"`
	LatencyLoad  float64     `json:"latency_load"`
	Baselines    []Baseline  `json:"baselines"`
	Runs         []EngineRun `json:"runs"`
	SQLite       []SQLiteRun `json:"sqlite,omitempty"` // Options.Cost
	Target       Target      `json:"target"`
	ExactlyOnce  bool        `json:"exactly_once"`
	UnsafeCommit bool        `json:"unsafe_commit,omitempty"`
}

// Baseline is one straight-SQL baseline.
type Baseline struct {
	Name              string   `json:"name"`
	Description       string   `json:"description"`
	Clients           int      `json:"clients"`
	PerTransaction    int      `json:"messages_per_transaction"`
	Seconds           float64  `json:"seconds"`
	TransitionsPerSec float64  `json:"transitions_per_sec"`
	DeliveriesPerSec  float64  `json:"deliveries_per_sec"`
	RoundTripsPerMsg  float64  `json:"round_trips_per_msg"`
	Applied           int64    `json:"applied"`
	Duplicates        int64    `json:"duplicates_skipped"`
	Retries           int64    `json:"retries"`
	Schema            string   `json:"schema"`
	ExactlyOnce       bool     `json:"exactly_once"`
	Problems          []string `json:"problems,omitempty"`
	// CPU is the client's and the server's CPU per delivery.
	CPU *CPU `json:"cpu,omitempty"`
}

// EngineRun is one engine configuration: a throughput phase on a pre-filled
// queue and, when LatencyLoad > 0, a latency phase under a paced producer.
type EngineRun struct {
	// Transport is empty for pgstore as store and queue, and names the
	// broker of a run with a separate transport (Options.Transport).
	Transport string `json:"transport,omitempty"`
	// Traced is set on runs with Options.Tracer.
	Traced bool `json:"traced,omitempty"`
	// Dedup is the engine's Config.Dedup: "retention" or "token".
	Dedup string `json:"dedup"`
	// Defaults is set on the run of the zero Config (Options.Defaults);
	// Batch, Lanes, Consumers and MaxConns then report what the defaults
	// came to on this machine.
	Defaults  bool `json:"defaults"`
	Batch     int  `json:"batch"`
	Lanes     int  `json:"lanes"`
	Consumers int  `json:"consumers"`
	MaxConns  int  `json:"max_conns"`
	// Partitioned is the run's Config.PartitionedReceive.
	Partitioned bool `json:"partitioned_receive,omitempty"`
	// Claim is how the engine was let take messages from the queue:
	// ClaimLease or ClaimTx; empty for a run on a broker.
	Claim string `json:"claim,omitempty"`
	// ClaimedInTx counts the throughput phase's deliveries claimed inside
	// units of work (the rest were leased by Receive).
	ClaimedInTx int64 `json:"claimed_in_tx"`

	Seconds           float64 `json:"seconds"`
	TransitionsPerSec float64 `json:"transitions_per_sec"`
	DeliveriesPerSec  float64 `json:"deliveries_per_sec"`
	RoundTripsPerMsg  float64 `json:"round_trips_per_msg"`
	RatioA            float64 `json:"ratio_a"`
	RatioB            float64 `json:"ratio_b"`
	Applied           int64   `json:"applied"`
	Duplicates        int64   `json:"duplicates_skipped"`
	Conflicts         int64   `json:"conflicts"`
	Retries           int64   `json:"retries"`
	// ClaimP50Ms and ClaimP99Ms are claim-to-commit times in the throughput
	// phase: how long a claimed batch takes, without the wait in the queue.
	ClaimP50Ms float64 `json:"claim_to_commit_p50_ms"`
	ClaimP99Ms float64 `json:"claim_to_commit_p99_ms"`
	Schema     string  `json:"schema"`
	// Breakdown is where the throughput phase's time went.
	Breakdown Breakdown `json:"breakdown"`

	// The latency phase: a producer publishes every 5 ms at LatencyRate
	// deliveries/s; latency is from the publish's return to the commit of
	// the unit of work that consumed the delivery, for the deliveries
	// published after the warm-up (LatencyWarmup).
	LatencyRate     float64 `json:"latency_rate"`
	LatencyAchieved float64 `json:"latency_rate_achieved"`
	LatencyMessages int     `json:"latency_messages"`
	// LatencyWarmup is how many of LatencyMessages the producer published
	// first, at the phase's pace for Options.LatencyWarmup; they are left
	// out of P50Ms and P99Ms (the engine's pool connects and prepares its
	// statements meanwhile). LatencyAchieved counts them too.
	LatencyWarmup    int     `json:"latency_warmup_messages"`
	P50Ms            float64 `json:"p50_ms"`
	P99Ms            float64 `json:"p99_ms"`
	LatencySchema    string  `json:"latency_schema,omitempty"`
	LatencyConflicts int64   `json:"latency_conflicts"`

	ExactlyOnce bool     `json:"exactly_once"`
	Problems    []string `json:"problems,omitempty"`
	// PeakRSSMiB is the benchmark process's peak resident set size over
	// the throughput phase (VmHWM; 0 where unknown).
	PeakRSSMiB float64 `json:"peak_rss_mib"`
	// Scale is the preloaded store of the run (Options.Sagas).
	Scale *Scale `json:"scale,omitempty"`
	// Cost is the throughput phase's cost (Options.Cost).
	Cost *Cost `json:"cost,omitempty"`
	// CPU is the throughput phase's client and server CPU per delivery.
	CPU *CPU `json:"cpu,omitempty"`
}

// Target is the goal, at batch size TargetBatch: at least 5× baseline
// (a), at least half of baseline (b), and fewer than 0.2 round trips per
// message. Best is the configuration at that batch size that meets the most
// of the three (the fastest among equals).
type Target struct {
	Batch            int     `json:"batch"`
	Lanes            int     `json:"lanes"`
	RatioA           float64 `json:"ratio_a"`
	RatioB           float64 `json:"ratio_b"`
	RoundTripsPerMsg float64 `json:"round_trips_per_msg"`
	MetA             bool    `json:"met_ratio_a"`
	MetB             bool    `json:"met_ratio_b"`
	MetRoundTrips    bool    `json:"met_round_trips"`
	Met              bool    `json:"met"`
	Evaluated        bool    `json:"evaluated"`
}

// TargetBatch is the batch size the target is stated for.
const TargetBatch = 100

// Run runs the baselines, then every engine configuration, and returns the
// report. An error means a run could not complete; a run that completed
// but broke exactly-once is reported with ExactlyOnce false.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.SchemaPrefix == "" {
		o.SchemaPrefix = "idem"
	}
	r := &runner{o: o, w: NewWorkload(o.Messages, o.Keys, o.Dup, o.Seed, "m-"), id: randHex(3)}
	r.log = o.Log
	if r.log == nil {
		r.log = io.Discard
	}
	rep := &Report{
		Date: time.Now().UTC().Format(time.RFC3339), Machine: machine(), Go: runtime.Version(),
		Messages: o.Messages, Distinct: r.w.Distinct, Duplicates: r.w.Duplicates(), Keys: o.Keys, Seed: o.Seed,
		LatencyLoad: o.LatencyLoad, UnsafeCommit: o.AllowUnsafeCommit, ExactlyOnce: true, LoadBefore: loadAverage(),
	}
	r.progress("workload: %d deliveries, %d distinct messages, %d duplicates, %d keys", o.Messages, rep.Distinct, rep.Duplicates, o.Keys)

	for _, b := range []struct {
		name, desc string
		per        int
	}{
		{"a", "one transaction per message", 1},
		{"b", fmt.Sprintf("hand-batched, %d messages per transaction", o.BaselineBatch), o.BaselineBatch},
	} {
		res, server, err := r.baseline(ctx, b.name, b.per)
		if err != nil {
			return nil, fmt.Errorf("baseline (%s): %w", b.name, err)
		}
		res.Description = b.desc
		rep.Server = server
		rep.ExactlyOnce = rep.ExactlyOnce && res.ExactlyOnce
		rep.Baselines = append(rep.Baselines, *res)
		r.progress("baseline (%s) %s: %.0f transitions/s, %.2f round trips/msg, %d retries",
			b.name, b.desc, res.TransitionsPerSec, res.RoundTripsPerMsg, res.Retries)
	}
	transports := []string{""}
	for _, b := range o.Brokers {
		transports = append(transports, b.Name)
	}
	traced := []bool{false}
	if o.Tracer != nil {
		traced = append(traced, true)
	}
	var configs []EngineRun
	if o.Defaults {
		configs = append(configs, EngineRun{Defaults: true})
	}
	for _, batch := range o.Batches {
		for _, lanes := range o.Lanes {
			for _, consumers := range r.consumers() {
				configs = append(configs, EngineRun{Batch: batch, Lanes: lanes, Consumers: consumers, MaxConns: lanes*consumers + 4, Partitioned: o.Partitioned})
			}
		}
	}
	configs = o.scaled(configs)
	for _, c := range configs {
		for _, tr := range transports {
			for _, trace := range traced {
				for _, dedup := range r.dedups() {
					for _, claim := range r.claims(tr) {
						run := c
						run.Transport, run.Traced, run.Dedup, run.Claim = tr, trace, dedup.String(), claim
						run.Partitioned = run.Partitioned || (tr != "" && !run.Defaults) // broker runs: see Options.Partitioned
						r.w = r.workload(&run)
						if err := r.idem(ctx, &run); err != nil {
							return nil, fmt.Errorf("idem%s %s: %w", via(tr, trace), configName(run), err)
						}
						run.RatioA = ratio(run.TransitionsPerSec, rep.Baselines[0].TransitionsPerSec)
						run.RatioB = ratio(run.TransitionsPerSec, rep.Baselines[1].TransitionsPerSec)
						rep.ExactlyOnce = rep.ExactlyOnce && run.ExactlyOnce
						rep.Runs = append(rep.Runs, run)
						r.progress("idem%s %s: %.0f transitions/s (%.2f× a, %.2f× b), %.3f round trips/msg, %d of %d claimed in units of work, p50 %.1f ms, p99 %.1f ms",
							via(tr, trace), configName(run), run.TransitionsPerSec, run.RatioA, run.RatioB, run.RoundTripsPerMsg, run.ClaimedInTx, o.Messages, run.P50Ms, run.P99Ms)
					}
				}
			}
		}
	}
	scaleRatios(rep.Runs)
	rep.Target = target(rep.Runs)
	if o.Cost {
		var err error
		if rep.SQLite, err = r.sqliteRuns(ctx, configs); err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// consumers are the Config.Consumers values to run.
func (r *runner) consumers() []int {
	if len(r.o.Consumers) == 0 {
		return []int{1}
	}
	return r.o.Consumers
}

// claims are the claim modes to run on transport tr: none on a broker,
// whose messages are not in the store's queue.
func (r *runner) claims(tr string) []string {
	switch {
	case tr != "":
		return []string{""}
	case len(r.o.Claims) == 0:
		return []string{ClaimTx}
	}
	return r.o.Claims
}

// configName names a run's engine configuration in progress lines and
// reports: "defaults (batch 64, lanes 4, consumers 1) claim tx" or
// "batch 100 lanes 1 consumers 4 claim lease".
func configName(r EngineRun) string {
	name := fmt.Sprintf("batch %d lanes %d consumers %d", r.Batch, r.Lanes, r.Consumers)
	if r.Defaults {
		name = fmt.Sprintf("defaults (batch %d, lanes %d, consumers %d)", r.Batch, r.Lanes, r.Consumers)
	}
	if r.Partitioned {
		name += " partitioned"
	}
	if r.token() {
		name += " dedup token"
	}
	if r.Claim != "" {
		name += " claim " + r.Claim
	}
	return name
}

// via names the transport of a run, and its tracing, in progress lines.
func via(tr string, traced bool) string {
	s := ""
	if tr != "" {
		s = " via " + tr
	}
	if traced {
		s += " traced"
	}
	return s
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func target(runs []EngineRun) Target {
	t := Target{Batch: TargetBatch}
	score := -1
	for _, r := range runs {
		if r.Batch != TargetBatch || r.Transport != "" || r.Traced || r.Defaults || r.token() {
			continue
		}
		c := Target{Batch: r.Batch, Lanes: r.Lanes, RatioA: r.RatioA, RatioB: r.RatioB, RoundTripsPerMsg: r.RoundTripsPerMsg,
			MetA: r.RatioA >= 5, MetB: r.RatioB >= 0.5, MetRoundTrips: r.RoundTripsPerMsg < 0.2, Evaluated: true}
		c.Met = c.MetA && c.MetB && c.MetRoundTrips
		s := 0
		for _, m := range []bool{c.MetA, c.MetB, c.MetRoundTrips} {
			if m {
				s++
			}
		}
		if s > score || (s == score && c.RatioA > t.RatioA) {
			t, score = c, s
		}
	}
	return t
}

type runner struct {
	o   Options
	w   *Workload
	id  string
	n   int // schemas made
	log io.Writer
}

func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(r.log, "idem bench: "+format+"\n", args...)
}

// open creates a fresh, migrated schema and returns a store on it and a
// function that closes the store and drops the schema.
func (r *runner) open(ctx context.Context, label string, maxConns int) (*pgstore.Store, string, func(), error) {
	r.n++
	schema := fmt.Sprintf("%s_bench_%s_%d%s", r.o.SchemaPrefix, r.id, r.n, label)
	st, err := pgstore.Open(ctx, r.o.URL, &pgstore.Config{
		Schema: schema, Migrate: true, MaxConns: int32(maxConns), AllowUnsafeCommit: r.o.AllowUnsafeCommit,
		Logger: slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		return nil, "", nil, err
	}
	return st, schema, func() {
		keep := r.o.KeepSchemas
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		var err error
		if !keep {
			_, err = st.Pool().Exec(dctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		}
		_ = st.Close()
		if err != nil {
			r.progress("could not drop schema %s: %v", schema, err)
		}
	}, nil
}

func (r *runner) baseline(ctx context.Context, name string, per int) (*Baseline, string, error) {
	clients := r.o.BaselineClients
	st, schema, closeFn, err := r.open(ctx, "_"+name, clients+1)
	if err != nil {
		return nil, "", err
	}
	defer closeFn()
	var server string
	if err := st.Pool().QueryRow(ctx, `SHOW server_version`).Scan(&server); err != nil {
		return nil, "", err
	}
	ctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	defer cancel()
	cpu, err := startCPU(ctx, st.Pool())
	if err != nil {
		return nil, "", err
	}
	trips0 := st.RoundTrips()
	start := time.Now()
	var c *baselineCounts
	if per == 1 {
		c, err = runPerMessage(ctx, st.Pool(), r.w, clients)
	} else {
		c, err = runBatched(ctx, st.Pool(), r.w, clients, per)
	}
	elapsed := time.Since(start)
	trips := st.RoundTrips() - trips0
	if err != nil {
		return nil, "", err
	}
	b := &Baseline{
		Name: name, Clients: clients, PerTransaction: per, Seconds: elapsed.Seconds(),
		TransitionsPerSec: float64(r.w.Distinct) / elapsed.Seconds(), DeliveriesPerSec: float64(len(r.w.Deliveries)) / elapsed.Seconds(),
		RoundTripsPerMsg: float64(trips) / float64(len(r.w.Deliveries)),
		Applied:          c.applied.Load(), Duplicates: c.duplicates.Load(), Retries: c.retries.Load(), Schema: schema,
		CPU: cpu.finish(len(r.w.Deliveries)),
	}
	b.Problems, err = verify(ctx, st.Pool(), r.w, "idem_outbox")
	if err != nil {
		return nil, "", err
	}
	if b.Applied != int64(r.w.Distinct) || b.Duplicates != int64(r.w.Duplicates()) {
		b.Problems = append(b.Problems, fmt.Sprintf("applied %d and skipped %d duplicates, want %d and %d", b.Applied, b.Duplicates, r.w.Distinct, r.w.Duplicates()))
	}
	b.ExactlyOnce = len(b.Problems) == 0
	return b, server, nil
}

// verify checks exactly-once in the schema pool works on: every key's
// counter equals its number of distinct messages, and the inbox and
// perMsgTables (journal, outbox, emitted messages) hold one row per distinct
// message.
func verify(ctx context.Context, pool *pgxpool.Pool, w *Workload, perMsgTables ...string) ([]string, error) {
	var problems []string
	rows, err := pool.Query(ctx, `SELECT key, (data->>'n')::bigint FROM idem_instances WHERE saga_type = $1`, SagaType)
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	got := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		if err := rows.Scan(&k, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("verify: %w", err)
		}
		got[k] = n
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	wrong := 0
	for k, want := range w.Expected {
		want += w.base(k)
		g, ok := got[keyName(k)]
		if (want == 0 && ok) || (want > 0 && g != int64(want)) {
			if wrong < 5 {
				problems = append(problems, fmt.Sprintf("key %s: counter %d, want %d", keyName(k), g, want))
			}
			wrong++
		}
	}
	if wrong > 5 {
		problems = append(problems, fmt.Sprintf("and %d more keys with a wrong counter", wrong-5))
	}
	for _, table := range append([]string{"idem_inbox"}, perMsgTables...) {
		var n int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+table+preloaded(table)).Scan(&n); err != nil {
			return nil, fmt.Errorf("verify: count %s: %w", table, err)
		}
		if n != w.Distinct {
			problems = append(problems, fmt.Sprintf("%s holds %d rows, want one per distinct message (%d)", table, n, w.Distinct))
		}
	}
	return problems, nil
}

// idem runs one engine configuration: the throughput phase, then the
// latency phase.
func (r *runner) idem(ctx context.Context, run *EngineRun) error {
	if err := r.throughput(ctx, run); err != nil {
		return err
	}
	if r.o.LatencyLoad > 0 {
		if err := r.latency(ctx, run); err != nil {
			return fmt.Errorf("latency phase: %w", err)
		}
	}
	run.ExactlyOnce = len(run.Problems) == 0
	return nil
}

// label names a run's schemas.
func (run *EngineRun) label() string {
	if run.Defaults {
		return "_def" + run.Claim
	}
	return fmt.Sprintf("_b%dl%dc%d%s", run.Batch, run.Lanes, run.Consumers, run.Claim)
}

// divertEmittedSQL keeps the messages the counter saga emits out of the
// engine's way. The engine enqueues them in idem_queue inside each unit of
// work, as it does for every emitted message (pgstore's enqueue statement
// and NOTIFY run unchanged); this rule stores them instead in a table of the
// same shape and indexes, as if another service consumed them from its own
// queue. Without it the engine would claim its own output and dead-letter
// it (no consumer), doubling its work; the baselines never read their
// outbox rows either. The rule costs Idem a second pass over the enqueued
// rows.
const divertEmittedSQL = `
CREATE TABLE bench_emitted (LIKE idem_queue INCLUDING ALL);
CREATE RULE bench_divert_emitted AS ON INSERT TO idem_queue
  WHERE NEW.envelope->>'type' = 'bench.Incremented'
  DO INSTEAD INSERT INTO bench_emitted (id, envelope, body, visible_at)
  VALUES (NEW.id, NEW.envelope, NEW.body, NEW.visible_at)`

// session is one engine on a fresh schema, consuming through a tap.
type session struct {
	st     *pgstore.Store
	pub    transport.Publisher // the queue, or the separate transport
	schema string
	tap    *tap
	e      *idem.Engine
	close  func()
	// emitted is the table that holds one row per emitted message.
	emitted string
}

func (r *runner) session(ctx context.Context, label string, run *EngineRun, w *Workload) (*session, error) {
	if run.Transport != "" {
		label += "_t"
	}
	st, schema, closeFn, err := r.open(ctx, label, run.MaxConns)
	if err != nil {
		return nil, err
	}
	if _, err := st.Pool().Exec(ctx, divertEmittedSQL); err != nil {
		closeFn()
		return nil, fmt.Errorf("divert emitted messages: %w", err)
	}
	t := newTap(st, len(w.Deliveries))
	t.claimTx = run.Claim == ClaimTx
	// Consumers taking turns claim in units of work only in "tx" runs that
	// set their configuration: the defaults run as the zero Config does.
	var tr transport.Transport = t
	s := &session{st: st, pub: st, schema: schema, tap: t, emitted: "bench_emitted"}
	if run.Transport != "" {
		// A separate transport: the engine keeps its outbox and publishes
		// to the broker, which drops re-published IDs (the workload's
		// duplicates) in its dedup window; the emitted messages stay in
		// the broker for another consumer. The tap then counts a message
		// done when its inbox record commits.
		bt, err := r.o.broker(run.Transport).New(ctx, schema, []string{incrementType})
		if err != nil {
			closeFn()
			return nil, fmt.Errorf("open transport %s: %w", run.Transport, err)
		}
		t.byID(w)
		tr, s.pub, s.emitted = tapTransport(bt, t), bt, "idem_outbox"
		prev := closeFn
		closeFn = func() { _ = bt.Close(); prev() }
	}
	cfg := &idem.Config{
		BatchSize: run.Batch, Lanes: run.Lanes, Consumers: run.Consumers, PartitionedReceive: run.Partitioned, Tracer: r.tracer(run), Dedup: dedupOf(run), SweepInterval: sweepInterval(run),
		Logger: slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelError})), JournalPayloadLimit: r.o.JournalPayloadLimit,
	}
	if run.Claim == ClaimLimit {
		cfg.Limits = []idem.Limit{{Name: "bench", MessageTypes: []string{incrementType}, Concurrency: cmp.Or(r.o.LimitCap, DefaultLimitCap)}}
	}
	e, err := idem.NewEngine(t, tr, cfg)
	if err == nil {
		err = e.Register(Machine())
	}
	if err != nil {
		closeFn()
		return nil, err
	}
	if run.Defaults {
		got := e.Config()
		run.Batch, run.Lanes, run.Consumers, run.MaxConns = got.BatchSize, got.Lanes, got.Consumers, st.PoolSize()
	}
	s.e, s.close = e, closeFn
	return s, nil
}

// start starts the engine; the returned function stops it.
func (s *session) start(ctx context.Context) (func() error, error) {
	if err := s.e.Start(ctx); err != nil {
		return nil, err
	}
	return func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return s.e.Stop(sctx)
	}, nil
}

// wait waits until every delivery has committed.
func (s *session) wait(ctx context.Context, timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-s.tap.done:
		return nil
	case <-s.e.Done():
		return errors.New("the engine stopped before the queue was drained")
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		s.tap.mu.Lock()
		left := s.tap.remaining
		s.tap.mu.Unlock()
		return fmt.Errorf("not drained after %s: %d of %d deliveries left (raise --timeout)", timeout, left, len(s.tap.committed))
	}
}

func (r *runner) throughput(ctx context.Context, run *EngineRun) error {
	s, err := r.session(ctx, run.label(), run, r.w)
	if err != nil {
		return err
	}
	defer s.close()
	run.Schema = s.schema
	if err := r.preload(ctx, s.st.Pool(), run.Scale); err != nil {
		return err
	}
	envs := r.w.Envelopes(time.Now())
	if run.token() {
		if err := mintTokens(ctx, s.st, envs); err != nil {
			return err
		}
	}
	for chunk := range slices.Chunk(envs, 1000) {
		if err := s.pub.Publish(ctx, chunk); err != nil {
			return fmt.Errorf("pre-enqueue: %w", err)
		}
	}
	if _, err := s.st.Pool().Exec(ctx, `ANALYZE idem_queue`); err != nil {
		return err
	}
	meter, err := r.startPGCost(ctx, s.st)
	if err != nil {
		return err
	}
	cpu, err := startCPU(ctx, s.st.Pool())
	if err != nil {
		return err
	}
	trips0 := s.st.RoundTrips()
	resetPeakRSS()
	start := time.Now()
	stop, err := s.start(ctx)
	if err != nil {
		return err
	}
	sweep := startSweep(ctx, s, run.Scale)
	werr := s.wait(ctx, r.o.Timeout)
	if err := stop(); werr == nil {
		werr = err
	}
	if err := sweep.finish(ctx, run.Scale, s.tap.doneAt); werr == nil {
		werr = err
	}
	if werr != nil {
		return werr
	}
	run.PeakRSSMiB = peakRSS()
	run.CPU = cpu.finish(len(r.w.Deliveries))
	if run.Cost, err = meter.finish(ctx, len(r.w.Deliveries)); err != nil {
		return err
	}
	elapsed := s.tap.doneAt.Sub(start).Seconds()
	stats := s.e.Stats()
	run.Seconds = elapsed
	run.TransitionsPerSec = float64(r.w.Distinct) / elapsed
	run.DeliveriesPerSec = float64(len(r.w.Deliveries)) / elapsed
	run.RoundTripsPerMsg = float64(s.tap.doneTrips-trips0) / float64(len(r.w.Deliveries))
	run.Applied, run.Duplicates, run.Conflicts, run.Retries = stats.Applied, stats.Duplicates, stats.Conflicts, stats.Retries
	s.tap.mu.Lock()
	run.Breakdown = s.tap.timing
	run.ClaimedInTx = s.tap.claimedInTx
	s.tap.mu.Unlock()
	claim := s.tap.latencies(s.tap.claimed)
	run.ClaimP50Ms, run.ClaimP99Ms = ms(percentile(claim, 0.50)), ms(percentile(claim, 0.99))
	problems, err := s.verify(ctx, run, r.w)
	if err != nil {
		return err
	}
	if run.Transport != "" {
		// The broker dropped the duplicates it saw in its dedup window; the
		// inbox skipped the others.
		if stats.Applied != int64(r.w.Distinct) || stats.Duplicates > int64(r.w.Duplicates()) {
			problems = append(problems, fmt.Sprintf("engine applied %d and skipped %d duplicates, want %d and at most %d", stats.Applied, stats.Duplicates, r.w.Distinct, r.w.Duplicates()))
		}
	} else if stats.Applied != int64(r.w.Distinct) || stats.Duplicates != int64(r.w.Duplicates()) {
		problems = append(problems, fmt.Sprintf("engine applied %d and skipped %d duplicates, want %d and %d", stats.Applied, stats.Duplicates, r.w.Distinct, r.w.Duplicates()))
	}
	run.Problems = append(run.Problems, problems...)
	return nil
}

// publishEvery is the latency phase producer's tick.
const publishEvery = 5 * time.Millisecond

func (r *runner) latency(ctx context.Context, run *EngineRun) error {
	run.LatencyRate = r.o.LatencyLoad * run.DeliveriesPerSec
	paced := max(100, int(run.LatencyRate*r.o.LatencyDuration.Seconds()))
	warm := int(run.LatencyRate * r.o.LatencyWarmup.Seconds())
	n := warm + paced
	w := NewWorkload(n, r.o.Keys, r.o.Dup, r.o.Seed+1, "l-")
	s, err := r.session(ctx, run.label()+"_lat", run, w)
	if err != nil {
		return err
	}
	defer s.close()
	run.LatencySchema, run.LatencyMessages, run.LatencyWarmup = s.schema, n, warm
	envs := w.Envelopes(time.Time{})
	if run.token() {
		if err := mintTokens(ctx, s.st, envs); err != nil {
			return err
		}
	}
	published := make([]time.Time, n)
	stop, err := s.start(ctx)
	if err != nil {
		return err
	}
	perr := func() error {
		tick := time.NewTicker(publishEvery)
		defer tick.Stop()
		start := time.Now()
		for sent := 0; sent < n; {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-s.e.Done():
				return errors.New("the engine stopped while publishing")
			case <-tick.C:
			}
			due := min(n, int(time.Since(start).Seconds()*run.LatencyRate)+1)
			if due <= sent {
				continue
			}
			now := time.Now()
			for i := sent; i < due; i++ {
				envs[i].SentAt = now
			}
			if err := s.pub.Publish(ctx, envs[sent:due]); err != nil {
				return fmt.Errorf("publish: %w", err)
			}
			at := time.Now()
			for i := sent; i < due; i++ {
				published[i] = at
			}
			sent = due
			if sent == n {
				run.LatencyAchieved = float64(n) / at.Sub(start).Seconds()
			}
		}
		return nil
	}()
	werr := perr
	if werr == nil {
		werr = s.wait(ctx, r.o.Timeout)
	}
	if err := stop(); werr == nil {
		werr = err
	}
	if werr != nil {
		return werr
	}
	clear(published[:warm]) // the warm-up is not measured
	lat := s.tap.latencies(published)
	run.P50Ms, run.P99Ms = ms(percentile(lat, 0.50)), ms(percentile(lat, 0.99))
	stats := s.e.Stats()
	run.LatencyConflicts = stats.Conflicts
	problems, err := s.verify(ctx, run, w)
	if err != nil {
		return err
	}
	for _, p := range problems {
		run.Problems = append(run.Problems, "latency phase: "+p)
	}
	return nil
}

// percentile returns the nearest-rank p-quantile of ds (0 when empty). It
// sorts ds.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(math.Ceil(p*float64(len(ds)))) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// machine describes the client machine (the server is usually the same
// one in these benchmarks).
func machine() string {
	model := "unknown CPU"
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
		_ = f.Close()
	}
	return fmt.Sprintf("%s, %d CPUs, GOMAXPROCS %d, %s/%s", model, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH)
}

// loadAverage returns the 1-minute load average, or -1 where unknown.
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return -1
	}
	var l float64
	if _, err := fmt.Sscan(string(b), &l); err != nil {
		return -1
	}
	return l
}

// tracer is the engine's Config.Tracer for run.
func (r *runner) tracer(run *EngineRun) idem.Tracer {
	if run.Traced {
		return r.o.Tracer
	}
	return nil
}

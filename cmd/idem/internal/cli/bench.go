package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/cmd/idem/internal/bench"
	"github.com/idemhq/idem/cmd/idem/internal/torture"
)

// benchLong is idem bench's help.
const benchLong = `Measure the engine on PostgreSQL (pgstore as store and queue) with a counter
saga whose every transition writes the instance, an inbox record and one
emitted message, on a stream of messages that includes duplicates.

In the same run, two baselines write the same rows in the same tables with
straight SQL over pgx: (a) one transaction per message, (b) the same writes
hand-batched --baseline-batch messages per transaction, both with
--baseline-clients concurrent clients. Idem's throughput is reported as a
ratio of each, with round trips per message.

For each --batch and --lanes pair, a throughput phase drains a pre-filled
queue; a latency phase then publishes at --latency-load of that rate and,
after --latency-warmup, reports p50/p99 from publish to commit. Every run
uses a fresh schema whose name starts with --schema (created and migrated by
the run), checks exactly-once afterwards and drops it (--keep-schemas keeps
them). In those schemas a rule diverts the messages the saga emits from the
queue to a table of their own, as if another service consumed them.

Run it on a quiet machine: the report gives the load average before and
after, and docs/benchmarks.md explains how to read it.

With --transport (repeatable), every configuration runs again for each
broker, with PostgreSQL as the store only and the broker as the transport
(inbox and outbox relay). JetStream's dedup window drops the workload's
re-published IDs; RabbitMQ has none, so the inbox skips them. The events
the saga emits stay in JetStream for another consumer; RabbitMQ routes them
to the same queues, and the benchmark acknowledges and drops them there.

With --trace, every configuration runs again with OpenTelemetry tracing
(package otelidem): every span is sampled, batched and handed to an
exporter that discards it, which measures what tracing costs the engine
without the network. Traced runs are marked "+trace".

With --claim lease,tx every PostgreSQL-queue configuration runs once per
way of taking messages, one right after the other: "lease" hides the
store's claim inside units of work from the engine (Receive leases each
batch in a transaction of its own, and the unit of work deletes it), "tx"
lets the engine claim a backlog inside the unit of work that applies it
(where it can: a batch is one lane, no plain handlers, one consumer or
--partitioned; the "claimed in tx" column says how much it did).
--consumers takes a list too.

With --dedup retention,token every configuration runs once per mode:
"+token" runs set Config.Dedup to DedupToken. The workload's sender mints
one token per distinct message before the measured phase, every copy
carries the token header, and the engine claims a token per applied
message and mints one per emitted message inside its units of work; the
exactly-once check then also expects every incoming token claimed and one
token per emitted message left. docs/benchmarks.md compares the modes.

With --sagas N (comma-separated for several sizes), every engine run first
preloads N live counter sagas and --inbox-rows inbox records (default 10 per
saga) into the engine's tables with set-based SQL, and the workload's keys
are drawn from those sagas instead of --keys; the exactly-once check leaves
the preloaded rows out. --finished F runs each size again with F finished
sagas past retention and the engine's sweeper deleting them during the
measured phase. Every run reports the process's peak RSS.

With --cost, each throughput phase also reports what it asked of the
database per message: statements and round trips (counted by the client),
commits, rows written, WAL records and bytes, and fsyncs (deltas of PostgreSQL's
statistics, which are the whole server's: run it on a server with nothing
else to do), and every configuration runs again on SQLite (a temporary
file) with its commits and rows written counted by the driver's hooks.

Exit code 1 if exactly-once is violated in any run, 2 for bad flags or when
the database cannot be used.` + benchReplicasHelp

// benchExample is idem bench's examples.
const benchExample = `  idem bench --store postgres://postgres@127.0.0.1:5432/postgres
  idem bench --store "$IDEM_STORE" --transport nats-embedded --transport amqp://guest:guest@127.0.0.1:5672/ --batch 100 --lanes 4
  idem bench --store "$IDEM_STORE" --messages 5000 --batch 100 --lanes 1,4 --json
  idem bench --store "$IDEM_STORE" --messages 5000 --batch 100 --lanes 4 --dedup retention,token
  idem bench --store "$IDEM_STORE" --messages 20000 --batch 64,100 --lanes 1,4 --consumers 1,4 --claim lease,tx
  idem bench --store "$IDEM_STORE" --replicas 1,2,4,8,16 --transport nats-embedded`

// newBench is the benchmark command.
func newBench() *cobra.Command {
	bf := &benchFlags{}
	cmd := &cobra.Command{
		Use:     "bench",
		Short:   "Measure saga transitions per second on PostgreSQL against straight-SQL baselines",
		Long:    benchLong,
		Example: benchExample,
		Args:    cobra.NoArgs,
		RunE:    bf.run,
	}
	bf.register(cmd)
	return cmd
}

// benchFlags are idem bench's flags: the bench.Options that flags set as
// they are, and the lists and switches parsed before a run.
type benchFlags struct {
	sf                storeFlags
	o                 bench.Options
	batches, lanes    string
	sagas, inbox      string
	dedups, consumers string
	claims            string
	replicas          string
	limitCap          int
	asJSON, quiet     bool
	traced            bool
	transportSpecs    []string
	cpuProfile        string
}

// register registers the flags on cmd.
func (bf *benchFlags) register(cmd *cobra.Command) {
	bf.sf.registerReadOnly(cmd)
	cmd.Flags().Lookup("store").Usage = "PostgreSQL server to measure on: postgres://user@host:port/db (default from IDEM_STORE); SQLite is not measured"
	f := cmd.Flags()
	f.IntVar(&bf.o.Messages, "messages", 20000, "deliveries per run, duplicates included")
	f.IntVar(&bf.o.Keys, "keys", 1000, "number of counter sagas (keys)")
	f.Float64Var(&bf.o.Dup, "dup", 0.2, "fraction of deliveries that repeat an earlier message ID, in [0, 1)")
	f.StringVar(&bf.batches, "batch", "1,10,100", "engine batch sizes to run, comma-separated")
	f.StringVar(&bf.lanes, "lanes", "1,4,16", "engine lane counts to run, comma-separated (every batch × lanes pair runs)")
	f.StringVar(&bf.consumers, "consumers", "4", "engine consumers to run, comma-separated: batches received and committed concurrently (Config.Consumers)")
	f.BoolVar(&bf.o.Partitioned, "partitioned", false, "run every configuration on the PostgreSQL queue but the defaults with Config.PartitionedReceive: each consumer receives its own partitions of the keys instead of taking turns on one stream (runs with a --transport always set it)")
	f.StringVar(&bf.claims, "claim", "tx", "how the engine may take messages from the PostgreSQL queue, comma-separated, each configuration once per way: lease (Receive leases a batch, its unit of work deletes it), tx (the engine claims a backlog inside the unit of work that applies it, where it can: one lane per batch, no plain handlers; consumers taking turns claim so only in tx runs that set the configuration, not in the defaults run, as the zero Config does not), limit (leases as lease does, through flow control's admission: the engine declares a concurrency cap of --limit-cap on the workload's messages, which never binds at its default)")
	f.IntVar(&bf.limitCap, "limit-cap", bench.DefaultLimitCap, "the concurrency cap of --claim limit runs (Config.Limits on the workload's message type); below the messages in flight it binds")
	f.BoolVar(&bf.o.Defaults, "defaults", true, "first run the engine with the zero Config (every default) and pgstore's default pool, labelled \"defaults\"")
	f.IntVar(&bf.o.BaselineClients, "baseline-clients", 8, "concurrent clients of the baselines")
	f.IntVar(&bf.o.BaselineBatch, "baseline-batch", 100, "messages per transaction of baseline (b)")
	f.Float64Var(&bf.o.LatencyLoad, "latency-load", 0.7, "rate of the latency phase as a fraction of the measured throughput; 0 skips it")
	f.DurationVar(&bf.o.LatencyDuration, "latency-duration", 3*time.Second, "how long the latency phase publishes and measures, after --latency-warmup")
	f.DurationVar(&bf.o.LatencyWarmup, "latency-warmup", 2*time.Second, "how long the latency phase publishes at its pace before it measures (the engine's pool connects and prepares its statements, the first backlog drains); 0 measures from the start")
	f.Uint64Var(&bf.o.Seed, "seed", 1, "seed of the workload")
	f.DurationVar(&bf.o.Timeout, "timeout", 10*time.Minute, "give up on a phase that has not finished by then")
	f.BoolVar(&bf.o.KeepSchemas, "keep-schemas", false, "keep the benchmark's schemas for inspection instead of dropping them")
	f.StringArrayVar(&bf.transportSpecs, "transport", nil, "also run each configuration with this broker as transport beside the PostgreSQL queue: "+brokerExamples(transportEmbedded, torture.TransportCluster)+" (repeat the flag for several)")
	f.StringVar(&bf.dedups, "dedup", "retention", "dedup modes to run, comma-separated: retention (the inbox with its retention window), token (the token inbox, Config.Dedup = DedupToken)")
	f.BoolVar(&bf.traced, "trace", false, "also run each configuration with OpenTelemetry tracing (otelidem, every span sampled, exported to a discarding exporter) to measure its cost")
	f.StringVar(&bf.sagas, "sagas", "", "preload the store of every engine run with this many live counter sagas, comma-separated for several sizes (each configuration runs once per size); the workload's keys are then drawn from them instead of --keys")
	f.StringVar(&bf.inbox, "inbox-rows", "", "inbox records preloaded over the --sagas sagas, one value per --sagas value (default 10 per saga)")
	f.IntVar(&bf.o.Finished, "finished", 0, "with --sagas, also run each size with this many finished sagas past retention preloaded, and the engine's sweeper deleting them during the measured phase")
	f.BoolVar(&bf.o.Cost, "cost", false, "also measure each run's cost per message (statements, round trips, commits, rows written, WAL records and bytes, fsyncs; PostgreSQL 15 or later, on a server with nothing else running) and run every configuration on SQLite too")
	f.StringVar(&bf.cpuProfile, "cpuprofile", "", "write a CPU profile of this process (baselines and engine runs) to this file, for go tool pprof")
	f.IntVar(&bf.o.JournalPayloadLimit, "journal-payload-limit", 0, "the engines' Config.JournalPayloadLimit: bytes of payload, headers and diff kept per journal entry (0: the default 4096; negative: none)")
	f.StringVar(&bf.replicas, "replicas", "", "run a replica sweep instead: this many engine processes on one database, comma-separated counts (1,2,4,8,16); see above")
	f.BoolVar(&bf.asJSON, "json", false, "print the report as JSON")
	f.BoolVarP(&bf.quiet, "quiet", "q", false, "do not print progress and engine errors on stderr")
}

// run sets the benchmark up from the flags, runs it and reports it.
func (bf *benchFlags) run(cmd *cobra.Command, _ []string) error {
	if cmd.Flags().Changed("replicas") {
		return bf.runReplicas(cmd)
	}
	if err := bf.options(cmd); err != nil {
		return err
	}
	stop, err := bf.prepare(cmd.Context())
	if err != nil {
		return err
	}
	defer stop()
	rep, err := bench.Run(cmd.Context(), bf.o)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	return bf.report(cmd.OutOrStdout(), rep, rep.ExactlyOnce)
}

// options completes bf.o from the flags' lists and the store, and
// validates it.
func (bf *benchFlags) options(cmd *cobra.Command) error {
	o := &bf.o
	var err error
	if o.Batches, err = intList("--batch", bf.batches); err != nil {
		return usageErrorf("%v", err)
	}
	if o.Lanes, err = intList("--lanes", bf.lanes); err != nil {
		return usageErrorf("%v", err)
	}
	if o.Dedups, err = dedupList(bf.dedups); err != nil {
		return usageErrorf("%v", err)
	}
	if o.Sagas, o.InboxRows, err = scaleLists(bf.sagas, bf.inbox); err != nil {
		return usageErrorf("%v", err)
	}
	if o.Consumers, err = intList("--consumers", bf.consumers); err != nil {
		return usageErrorf("%v", err)
	}
	o.Claims = strings.Split(bf.claims, ",")
	o.LimitCap = bf.limitCap
	if o.URL, err = bf.sf.benchURL(); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return usageErrorf("%v", err)
	}
	o.SchemaPrefix, o.AllowUnsafeCommit = bf.sf.schema, bf.sf.allowUnsafeCommit
	if !bf.quiet {
		o.Log = cmd.ErrOrStderr()
	}
	return nil
}

// prepare opens what the run uses besides its store: the brokers of
// --transport, the tracer of --trace and the profile of --cpuprofile. stop
// releases them, the last opened first; prepare releases them itself when
// it fails.
func (bf *benchFlags) prepare(ctx context.Context) (stop func(), err error) {
	var stops []func()
	stopAll := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stopAll()
		}
	}()
	seen := map[string]bool{}
	for _, spec := range bf.transportSpecs {
		name := transportName(spec)
		if seen[name] {
			return nil, usageErrorf("--transport %s given twice: give each kind of broker once", name)
		}
		seen[name] = true
		open, stopBroker, err := benchTransport(ctx, spec)
		if err != nil {
			return nil, err
		}
		stops = append(stops, stopBroker)
		bf.o.Brokers = append(bf.o.Brokers, bench.Broker{Name: transportName(spec), New: open})
	}
	if bf.traced {
		tracer, stopTracer := benchTracer()
		stops = append(stops, stopTracer)
		bf.o.Tracer = tracer
	}
	if bf.cpuProfile != "" {
		stopProfile, err := startCPUProfile(bf.cpuProfile)
		if err != nil {
			return nil, err
		}
		stops = append(stops, stopProfile)
	}
	return stopAll, nil
}

// textReport is a report of idem bench: the matrix's or the replica
// sweep's.
type textReport interface{ WriteText(w io.Writer) error }

// report prints rep, as text or JSON; a run that broke exactly-once
// exits 1.
func (bf *benchFlags) report(w io.Writer, rep textReport, exactlyOnce bool) error {
	var err error
	if bf.asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.WriteText(w)
	}
	if err != nil {
		return err
	}
	if !exactlyOnce {
		return &exitError{code: 1, err: errors.New("exactly-once violated: see the report")}
	}
	return nil
}

// benchURL returns the PostgreSQL URL of the flags, refusing other stores
// as openPG does. (idem bench opens many schemas, not the one of --schema.)
func (f *storeFlags) benchURL() (string, error) {
	if f.url == "" {
		return "", usageErrorf("no store given: pass --store postgres://user@host:port/db or set IDEM_STORE")
	}
	scheme, _, ok := strings.Cut(f.url, "://")
	if !ok || (scheme != "postgres" && scheme != "postgresql") {
		return "", usageErrorf("unsupported store %q: idem bench needs postgres://user@host:port/db", redactURL(f.url))
	}
	return f.url, nil
}

// intList parses a comma-separated list of positive integers.
func intList(flag, s string) ([]int, error) {
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n, err := strconv.Atoi(part)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive integer", flag, part)
		}
		out = append(out, n)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s needs at least one value", flag)
	}
	return out, nil
}

// scaleLists parses --sagas and --inbox-rows (both optional).
func scaleLists(sagas, inbox string) (s, in []int, err error) {
	if strings.TrimSpace(sagas) != "" {
		if s, err = intList("--sagas", sagas); err != nil {
			return nil, nil, err
		}
	}
	if strings.TrimSpace(inbox) == "" {
		return s, nil, nil
	}
	if len(s) == 0 {
		return nil, nil, fmt.Errorf("--inbox-rows needs --sagas")
	}
	for part := range strings.SplitSeq(inbox, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(part))
		if err != nil || n < 0 {
			return nil, nil, fmt.Errorf("--inbox-rows: %q is not a non-negative integer", part)
		}
		in = append(in, n)
	}
	return s, in, nil
}

// dedupList parses --dedup: comma-separated modes, each once.
func dedupList(s string) ([]idem.Dedup, error) {
	var out []idem.Dedup
	seen := map[idem.Dedup]bool{}
	for _, part := range strings.Split(s, ",") {
		d, err := idem.ParseDedup(strings.TrimSpace(part))
		if err != nil || strings.TrimSpace(part) == "" {
			return nil, fmt.Errorf("--dedup: %q is not a mode: use retention, token or retention,token", part)
		}
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out, nil
}

// startCPUProfile writes a CPU profile of the process to path until the
// returned function is called.
func startCPUProfile(path string) (func(), error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}, nil
}

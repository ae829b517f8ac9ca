package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idemhq/idem/cmd/idem/internal/bench"
	"github.com/idemhq/idem/cmd/idem/internal/torture"
	"github.com/idemhq/idem/transport"
)

// benchReplicasHelp is the part of idem bench's help about --replicas.
const benchReplicasHelp = `

With --replicas N,M,… the run is a replica sweep instead: for each count,
that many engine processes (this binary, started as workers) share one
PostgreSQL database, each with the zero Config and pgstore's default pool.
The queue is pre-filled with the stream and drained (throughput); then
fresh replicas consume a stream published at --latency-load of the first
count's throughput, one rate for every count (p50/p99 from publish to
commit). Each count reports conflicts, leases lost, round trips and
transactions per delivery, the replicas' and the server's CPU and WAL per
delivery, the peak of connections and of lock waits, and the server's
active backends by wait event. With --transport, the sweep runs again with
the broker as transport (nats-embedded, nats:// or amqp://). The server's
figures are the whole server's: run it on a server with nothing else to do.
The flags that choose engine configurations (--batch, --lanes, --claim, …)
do not apply.`

// replicaOnlyFlags are idem bench's flags that a replica sweep uses; the
// others choose configurations the sweep does not run.
var replicaOnlyFlags = map[string]bool{
	"store": true, "schema": true, "allow-unsafe-commit": true, "replicas": true, "messages": true, "keys": true, "dup": true,
	"seed": true, "latency-load": true, "latency-duration": true, "latency-warmup": true, "timeout": true, "keep-schemas": true,
	"transport": true, "json": true, "quiet": true,
}

// runReplicas runs idem bench --replicas.
func (bf *benchFlags) runReplicas(cmd *cobra.Command) error {
	o, err := bf.replicaOptions(cmd)
	if err != nil {
		return err
	}
	brokers, stop, err := replicaBrokers(cmd.Context(), bf.transportSpecs)
	if err != nil {
		return err
	}
	defer stop()
	o.Brokers = brokers
	rep, err := bench.RunReplicas(cmd.Context(), *o)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	return bf.report(cmd.OutOrStdout(), rep, rep.ExactlyOnce)
}

// replicaOptions are the sweep's options from the flags.
func (bf *benchFlags) replicaOptions(cmd *cobra.Command) (*bench.ReplicaOptions, error) {
	var bad error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if bad == nil && !replicaOnlyFlags[f.Name] {
			bad = usageErrorf("--%s does not apply with --replicas: every replica runs the zero Config; drop the flag", f.Name)
		}
	})
	if bad != nil {
		return nil, bad
	}
	counts, err := intList("--replicas", bf.replicas)
	if err != nil {
		return nil, usageErrorf("%v", err)
	}
	url, err := bf.sf.benchURL()
	if err != nil {
		return nil, err
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find the idem executable to start replicas: %w", err)
	}
	o := &bench.ReplicaOptions{
		URL: url, SchemaPrefix: bf.sf.schema, AllowUnsafeCommit: bf.sf.allowUnsafeCommit, Replicas: counts,
		Messages: bf.o.Messages, Keys: bf.o.Keys, Dup: bf.o.Dup, Seed: bf.o.Seed,
		LatencyLoad: bf.o.LatencyLoad, LatencyDuration: bf.o.LatencyDuration, LatencyWarmup: bf.o.LatencyWarmup,
		Timeout: bf.o.Timeout, KeepSchemas: bf.o.KeepSchemas,
		Command: func(args []string) *exec.Cmd { return exec.Command(exe, append([]string{"bench-replica"}, args...)...) },
	}
	if !bf.quiet {
		o.Log = cmd.ErrOrStderr()
	}
	if err := o.Validate(); err != nil {
		return nil, usageErrorf("%v", err)
	}
	return o, nil
}

// replicaBrokers opens the brokers of --transport for a replica sweep: for
// nats-embedded, a server in this process that the replicas reach by its
// URL. stop stops what was started.
func replicaBrokers(ctx context.Context, specs []string) (_ []bench.ReplicaBroker, _ func(), err error) {
	var stops []func()
	stop := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
	}
	defer func() {
		if err != nil {
			stop()
		}
	}()
	var out []bench.ReplicaBroker
	for _, spec := range specs {
		name := transportName(spec)
		if b, err := brokerFor(spec); err != nil || b.replica == nil || spec == torture.TransportCluster {
			return nil, nil, usageErrorf("--transport %s: a replica sweep runs on nats-embedded, nats://… or amqp://…", redactURL(spec))
		}
		worker := spec
		if spec == transportEmbedded {
			dir, err := os.MkdirTemp("", "idem-bench-nats-")
			if err != nil {
				return nil, nil, err
			}
			url, stopNATS, err := natsServer(ctx, spec, dir)
			if err != nil {
				_ = os.RemoveAll(dir)
				return nil, nil, err
			}
			stops = append(stops, func() { stopNATS(); _ = os.RemoveAll(dir) })
			worker = url
		}
		open, stopBroker, err := benchTransport(ctx, worker)
		if err != nil {
			return nil, nil, err
		}
		stops = append(stops, stopBroker)
		out = append(out, bench.ReplicaBroker{Broker: bench.Broker{Name: name, New: open}, WorkerSpec: worker})
	}
	return out, stop, nil
}

// newBenchReplica is the hidden replica process of idem bench --replicas.
func newBenchReplica() *cobra.Command {
	var o bench.ReplicaWorker
	var spec string
	cmd := &cobra.Command{
		Use:    "bench-replica",
		Short:  "A replica of idem bench --replicas (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			if spec != "" {
				o.Broker = &bench.Broker{Name: transportName(spec), New: replicaTransport(spec)}
			}
			o.Log = cmd.ErrOrStderr()
			return bench.RunReplicaWorker(ctx, o, cmd.InOrStdin(), cmd.OutOrStdout())
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.URL, "store", "", "the sweep's PostgreSQL server")
	f.StringVar(&o.Schema, "schema", "", "the phase's schema")
	f.BoolVar(&o.AllowUnsafeCommit, "allow-unsafe-commit", false, "accept synchronous_commit=off")
	f.IntVar(&o.Messages, "messages", 0, "deliveries of the phase's workload")
	f.IntVar(&o.Keys, "keys", 0, "keys of the workload")
	f.Float64Var(&o.Dup, "dup", 0, "duplicate fraction of the workload")
	f.Uint64Var(&o.Seed, "seed", 0, "seed of the workload")
	f.StringVar(&o.Prefix, "prefix", "", "message ID prefix of the workload")
	f.StringVar(&spec, "transport", "", "the broker (nats:// or amqp://); empty: the store's queue")
	return cmd
}

// replicaTransport opens a replica's transport on the sweep's namespace
// through its entry in brokers: as benchTransport does, but leaving the
// namespace for the sweep to delete.
func replicaTransport(spec string) benchOpener {
	return func(ctx context.Context, ns string, types []string) (transport.Transport, error) {
		b, err := brokerFor(spec)
		if err != nil {
			return nil, err
		}
		if b.replica == nil {
			return nil, usageErrorf("--transport %s: a replica sweep does not run on %s", redactURL(spec), b.name)
		}
		return b.replica(ctx, spec, ns, types)
	}
}

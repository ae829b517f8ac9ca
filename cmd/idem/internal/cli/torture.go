package cli

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/cmd/idem/internal/torture"
)

func newTorture() *cobra.Command {
	var (
		o      torture.Options
		faults string
		quiet  bool
	)
	cmd := &cobra.Command{
		Use:   "torture",
		Short: "Run sagas through worker processes under injected faults and check exactly-once from the database",
		Long: `Run a workload of many sagas (a counter whose every increment emits one
event, and the search-import saga) and two recurring schedules (every 1s,
missed ticks fired once; every 700ms, missed ticks skipped) through
--workers worker processes of this binary sharing one store, inject faults
on a schedule drawn from --seed, then let the run settle and check the
history against the database.

Stores: sqlite (a file in a temporary directory) or a postgres:// URL (a
fresh schema); either is also the queue unless --transport names a broker. The in-memory store is
not supported: it cannot be shared by processes or survive their kills.

Faults (--faults, comma-separated; default all):
  dup          every message published 1-4 times, copies through two publishers at once
  kill         SIGKILL of a random worker at random moments (then restarted)
  commit-kill  a worker SIGKILLs itself right after a commit, before ack and send
  uow-kill     a worker SIGKILLs itself between loading and committing
  stall        a worker stalls past its lease before committing (fenced or conflicts)
  stale-timer  timers delivered again after their saga moved on
  bad-input    malformed, unknown, badly keyed and oversized messages mixed in
  pg-restart   PostgreSQL restarted while work is in flight (needs --pg-restart-cmd)
  broker-restart
               the broker restarted while work is in flight: the driver's own
               server with --transport nats-embedded, or --broker-restart-cmd;
               with --transport nats-cluster, the node leading the run's
               stream killed and brought back, then another node
  failover     the PostgreSQL primary of a Patroni cluster fails over, several
               times, rotating among --failover-kinds (needs --patroni and a
               --store URL on that cluster; the driver runs on its host):
               kill (SIGKILL of the primary's postmaster), switchover (what
               patronictl switchover --force asks: the old primary stays up
               as a replica) and fence (the primary fenced read-only in place,
               default_transaction_read_only on with its sessions open, its
               Patroni agent killed until the standby is promoted and a unit
               of work commits there, then started again: writes on the old
               sessions fail with SQLSTATE 25006). The report gives each failover's
               unavailability, from the fault to the first commit on the new
               primary, and the run fails if no failover happened or one
               left nothing committed on the new primary within 30s.

Transports (--transport): empty (the store is the queue), nats-embedded
(one nats-server in the driver's process, JetStream files in the run's
directory), nats-cluster (a three-node JetStream cluster in the driver's
process, streams of three replicas), nats://host:4222,
amqp://user:pass@host:5672/vhost or redis://user:pass@host:6379/0. A
broker run uses its own stream or
namespace (deleted after a pass), and the workers' lease (2s) as the
broker's AckWait (NATS) or lease (RabbitMQ, Redis).

The checker verifies: each message applied at most once; each message sent
applied (or consumed) exactly once; every saga in the state the model
predicts; every emitted message consumed under its deterministic ID; no
saga stuck non-terminal with nothing in flight; every bad input
dead-lettered with its reason; every schedule tick fired (as recorded by a
database trigger on each advance) applied exactly once, and ticks passed
over only as the schedule's missed-tick policy allows. Each violation
names the saga and message IDs; the exit code is 1 if any invariant fails.

With --limits the workers also declare flow-control limits, the driver's
messages carry one of two tenants in the idem-fairness-key header (one of
them sends three quarters of the load), every worker logs each admission
and each settlement, and the checker also verifies: never more holds of a
capped counter at once than its cap; never more than Rate × t + Burst
admissions in any window of length t; every counter at zero in flight once
the run drained (no leaked slot); and, with --fairness-bound, no tenant
going longer than the bound with a message waiting and none admitted
(the workers receive in fair order, Config.FairShare; not beside a
broker, where the engine refuses fair share). Beside a --transport the
workers log the store's Admit and the releases of its holds instead
(docs/flow-control.md, "Proven by torture").

With --roll the run is a rolling deploy: the workers start on definition
A of the sagas; from a third of --duration every worker that starts runs
definition B (the counter gains a state on its main path, and both sagas'
documents go to schema version 2), and the driver replaces the A workers
one at a time (SIGTERM, restart as B) while kills go on, so A and B serve
the same queue side by side. An A worker that meets a saga B wrote gives
its message back (docs/deploys.md, "Mixed fleets"); the workers'
MaxAttempts is raised so that the retry schedule outlasts the roll. The
checker also verifies that nothing was dead-lettered for a reason the
deploy caused (unknown_state, unhandled_event, state_schema), that the
roll completed, and that A workers did give messages back: a run where
A and B never met fails as "not a rolling deploy".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if faults != "all" {
				o.Faults = strings.Split(faults, ",")
			}
			if slices.Contains(o.Faults, torture.FaultFailover) && o.Patroni == "" {
				return &exitError{code: 2, err: torture.ErrNoFailover}
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find the idem executable to start workers: %w", err)
			}
			o.Command = func() *exec.Cmd { return exec.Command(exe, "torture-worker") }
			o.OpenTransport = tortureTransport
			if !quiet {
				o.Log = cmd.ErrOrStderr()
			}
			r, err := torture.Run(cmd.Context(), o)
			if err != nil {
				return &exitError{code: 2, err: err}
			}
			r.Print(cmd.OutOrStdout())
			if !r.Pass() {
				return &exitError{code: 1, err: errors.New("torture run failed: see the violations above")}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Store, "store", "sqlite", "sqlite or a postgres:// URL")
	f.StringVar(&o.Transport, "transport", "", "a broker: "+brokerExamples(transportEmbedded, torture.TransportCluster)+" (empty: the store's own queue)")
	f.DurationVar(&o.Duration, "duration", 60*time.Second, "how long to send work and inject faults")
	f.DurationVar(&o.Settle, "settle", 3*time.Minute, "how long to wait, afterwards, for everything in flight to finish")
	f.Uint64Var(&o.Seed, "seed", 1, "seed of the workload and the fault schedule (process scheduling still varies)")
	f.IntVar(&o.Workers, "workers", 3, "worker processes")
	f.StringVar(&faults, "faults", "all", "fault mix: all, or a comma-separated list of "+strings.Join(torture.AllFaults, ","))
	f.IntVar(&o.MinKills, "kills", 10, "fail unless at least this many worker kills happened")
	f.StringVar(&o.PGRestartCmd, "pg-restart-cmd", "", "shell command that restarts the PostgreSQL server (for the pg-restart fault)")
	f.StringVar(&o.BrokerRestartCmd, "broker-restart-cmd", "", "shell command that restarts the broker of --transport nats://…, amqp://… or redis://… (for the broker-restart fault)")
	f.StringVar(&o.Patroni, "patroni", "", "comma-separated REST API URLs of the Patroni cluster that --store names, for the failover fault (scripts/pg-ha.sh exports IDEM_TEST_PG_HA_PATRONI)")
	f.StringSliceVar(&o.FailoverKinds, "failover-kinds", nil, "the failover kinds to rotate among: "+strings.Join(torture.FailoverKinds, ",")+" (default all)")
	f.StringVar(&o.Dir, "dir", "", "directory for the history, fault log and SQLite file (default: a temporary one, removed after a pass)")
	f.BoolVar(&o.Limits, "limits", false, "declare flow-control limits (a cap of 2 on a shared resource, 20/s burst 5, a cap of 8 per tenant; two tenants, one flooding) and check them too (on the store's own queue or beside a --transport)")
	f.DurationVar(&o.FairnessBound, "fairness-bound", 0, "with --limits, fail if a tenant has a message waiting and no admission at all for longer than this (0: not checked)")
	f.BoolVar(&o.Roll, "roll", false, "roll the workers from definition A of the sagas to definition B (a new state and a schema version) while the workload flows, and check that the deploy dead-lettered nothing")
	f.BoolVar(&quiet, "quiet", false, "no progress lines on stderr")
	f.StringVar(&o.Break, "break", "", "break the engine on purpose (skip-inbox, ack-before-commit, no-admission with --limits, roll-dead-letter with --roll) to see the checker fail")
	_ = f.MarkHidden("break")
	return cmd
}

// newTortureWorker is the hidden worker process of idem torture.
func newTortureWorker() *cobra.Command {
	return &cobra.Command{
		Use:    "torture-worker",
		Short:  "A worker process of idem torture (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if code := torture.RunWorkerFromEnv(tortureTransport); code != 0 {
				return &exitError{code: code, err: fmt.Errorf("torture worker exited with %d", code)}
			}
			return nil
		},
	}
}

package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
)

// newReplicas is `idem replicas` and its subcommand ls.
func newReplicas() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "replicas",
		Short: "List the engine replicas that beat into the store",
		Long: `Every running engine writes a heartbeat to the store (ID, host, version,
start time, configuration summary, lanes, consumers, last batch, lag).
These commands read the store directly, like the console's replicas page.`,
	}
	cmd.AddCommand(newReplicasLs())
	return cmd
}

func newReplicasLs() *cobra.Command {
	var sf storeFlags
	var limit int
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [--limit N] [--json]",
		Short: "List replicas, the most recently started first, with their state",
		Long: `List the replicas, the most recently started first, with their state as the
console's replicas page judges it: alive, stopped (it stopped cleanly) or
gone (no heartbeat for ` + fmt.Sprint(store.ReplicaGoneBeats) + ` of its intervals: it crashed, was killed or lost
the store). The count by state is printed on stderr. --json prints what GET
/api/replicas answers (without "self": this command is no replica).
` + storeHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			rr, ok := st.(store.ReplicaRegistry)
			if !ok {
				return failed(fmt.Errorf("store %T keeps no replica heartbeats", st))
			}
			rs, err := rr.Replicas(ctx, limit)
			if err != nil {
				return failed(fmt.Errorf("list replicas: %w", err))
			}
			list := replicaList(rs, time.Now())
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if err := printReplicas(cmd, list); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "%d alive, %d stopped, %d gone\n", list.Counts.Alive, list.Counts.Stopped, list.Counts.Gone)
			return nil
		},
	}
	sf.registerReadOnly(cmd)
	limitFlag(cmd, &limit, 100, "at most this many replicas")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

// replicaList is the replicas as GET /api/replicas shows them, each in
// the state store.Replica.State judges at now (as the console does).
func replicaList(rs []store.Replica, now time.Time) *admin.ReplicaList {
	out := &admin.ReplicaList{Replicas: make([]admin.Replica, 0, len(rs))}
	for i := range rs {
		r := &rs[i]
		x := admin.Replica{
			ID: r.ID, Host: r.Host, Version: r.Version, StartedAt: r.StartedAt, Config: r.Config,
			Lanes: r.Lanes, Consumers: r.Consumers, LastBatchAt: r.LastBatchAt, LagSeconds: r.Lag.Seconds(),
			IntervalSeconds: r.Interval.Seconds(), BeatAt: r.BeatAt, StoppedAt: r.StoppedAt, State: r.State(now),
		}
		switch x.State {
		case store.ReplicaAlive:
			out.Counts.Alive++
		case store.ReplicaStopped:
			out.Counts.Stopped++
		case store.ReplicaGone:
			out.Counts.Gone++
		}
		out.Replicas = append(out.Replicas, x)
	}
	return out
}

func printReplicas(cmd *cobra.Command, list *admin.ReplicaList) error {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tHOST\tSTATE\tSTARTED\tLAST BEAT\tLAST BATCH\tLAG\tLANES\tCONSUMERS\tVERSION")
	for _, r := range list.Replicas {
		last := "-"
		if !r.LastBatchAt.IsZero() {
			last = r.LastBatchAt.UTC().Format(time.RFC3339)
		}
		lag := time.Duration(r.LagSeconds * float64(time.Second)).Round(time.Millisecond)
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\n", clean(r.ID), clean(r.Host), r.State,
			r.StartedAt.UTC().Format(time.RFC3339), r.BeatAt.UTC().Format(time.RFC3339), last, lag, r.Lanes, r.Consumers, clean(r.Version))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write the list: %w", err)
	}
	return nil
}

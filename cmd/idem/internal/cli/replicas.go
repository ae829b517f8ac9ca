package cli

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
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
console's replicas page judges it: alive, stopped (it stopped cleanly),
gone (no heartbeat for ` + fmt.Sprint(store.ReplicaGoneBeats) + ` of its intervals: it crashed, was killed or lost
the store) or replaced (gone, and a replica started after its last beat is
alive). The count by state, of every record the store keeps, is printed on
stderr. --json prints what GET
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
			now := time.Now()
			list := replicaList(rs, now)
			if rc, ok := st.(readmodel.ReplicaCounter); ok {
				c, err := rc.CountReplicas(ctx, now)
				if err != nil {
					return failed(fmt.Errorf("count replicas: %w", err))
				}
				list.Counts = admin.ReplicaCounts{Alive: c.Alive, Stopped: c.Stopped, Gone: c.Gone, Replaced: c.Replaced}
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), list)
			}
			if err := printReplicas(cmd, list); err != nil {
				return err
			}
			c := list.Counts
			fmt.Fprintf(cmd.ErrOrStderr(), "%d alive, %d stopped, %d gone, %d replaced\n", c.Alive, c.Stopped, c.Gone, c.Replaced)
			return nil
		},
	}
	sf.registerReadOnly(cmd)
	limitFlag(cmd, &limit, 100, "at most this many replicas")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

// replicaList is the replicas as GET /api/replicas shows them, each in
// the state the console judges at now: store.Replica.State, with a gone
// one whose last beat is before an alive one's start replaced. Its counts
// are of the rows listed.
func replicaList(rs []store.Replica, now time.Time) *admin.ReplicaList {
	out := &admin.ReplicaList{Replicas: make([]admin.Replica, 0, len(rs))}
	var liveStart time.Time
	for i := range rs {
		if rs[i].State(now) == store.ReplicaAlive && rs[i].StartedAt.After(liveStart) {
			liveStart = rs[i].StartedAt
		}
	}
	for i := range rs {
		r := &rs[i]
		x := admin.Replica{
			ID: r.ID, Host: r.Host, Version: r.Version, StartedAt: r.StartedAt, Config: r.Config,
			Lanes: r.Lanes, Consumers: r.Consumers, LastBatchAt: r.LastBatchAt, LagSeconds: r.Lag.Seconds(),
			IntervalSeconds: r.Interval.Seconds(), BeatAt: r.BeatAt, StoppedAt: r.StoppedAt, State: r.State(now),
		}
		if x.State == store.ReplicaGone && r.BeatAt.Before(liveStart) {
			x.State = admin.ReplicaReplaced
		}
		switch x.State {
		case store.ReplicaAlive:
			out.Counts.Alive++
		case store.ReplicaStopped:
			out.Counts.Stopped++
		case store.ReplicaGone:
			out.Counts.Gone++
		case admin.ReplicaReplaced:
			out.Counts.Replaced++
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

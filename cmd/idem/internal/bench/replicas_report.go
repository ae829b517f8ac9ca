package bench

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
)

// WriteText prints the sweep's report as tables.
func (rep *ReplicaReport) WriteText(w io.Writer) error {
	p := &errWriter{w: w}
	p.printf("idem bench --replicas, %s\n", rep.Date)
	p.printf("client:   %s, %s; load average %.2f at the start, %.2f at the end\n", rep.Machine, rep.Go, rep.LoadBefore, rep.LoadAfter)
	p.printf("server:   PostgreSQL %s, max_connections %d\n", rep.Server, rep.MaxConnections)
	p.printf("workload: %d deliveries = %d distinct Increment messages + %d duplicates, %d counter sagas, seed %d\n",
		rep.Messages, rep.Distinct, rep.Duplicates, rep.Keys, rep.Seed)
	p.printf("replicas: engine processes with the zero idem.Config and pgstore's default pool, on one database\n")
	p.printf("\nThroughput: the queue pre-filled with the whole stream; p50/p99 from publish to commit under a producer paced at\n")
	p.printf("one rate for every replica count of a transport (a fraction of the first count's throughput)\n\n")
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "transport\treplicas\tdeliveries/s\trelative\tp50 ms\tp99 ms\tpaced at/s\tconflicts\tleases lost\tredelivered\tround trips/dlv\ttx/dlv\tconnections\tlock waits\texactly-once\t")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.2f\t%.1f\t%.1f\t%.0f\t%d\t%d\t%d\t%.3f\t%.3f\t%d\t%d\t%s\t\n",
			transportName(EngineRun{Transport: r.Transport}), r.Replicas, r.DeliveriesPerSec, r.Relative, r.P50Ms, r.P99Ms, r.LatencyRate,
			r.Conflicts, r.LeaseLost, r.Redelivered, r.RoundTrips, r.Transactions, r.Connections, r.LockWaits, okText(r.ExactlyOnce))
	}
	_ = tw.Flush()

	p.printf("\nCost per delivery over the throughput phase (CPU in µs: engine = the replicas' processes, server = PostgreSQL's,\n")
	p.printf("sweep = this process, with an embedded broker; WAL and transactions are the whole server's)\n\n")
	tw = tabwriter.NewWriter(p, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "transport\treplicas\tengine CPU\tserver CPU\tsweep CPU\tWAL bytes\tstatements\treceives\tdeliveries/receive\tunits of work\tclaimed in tx\tapplied per replica\t")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%s\t%d\t%.0f\t%.0f\t%.0f\t%.0f\t%.3f\t%d\t%.1f\t%d\t%d\t%s\t\n",
			transportName(EngineRun{Transport: r.Transport}), r.Replicas, r.EngineCPUUs, r.ServerCPUUs, r.SweepCPUUs, r.WALBytes, r.Statements,
			r.Receives, ratio(float64(r.Received), float64(r.Receives)), r.UnitsOfWork, r.ClaimedInTx, spread(r.PerReplica))
	}
	_ = tw.Flush()

	p.printf("\nActive backends by wait event over the throughput phase's samples (share of samples × backends; top 5)\n\n")
	for _, r := range rep.Runs {
		p.printf("  %s, %d replicas (%d samples): %s\n", transportName(EngineRun{Transport: r.Transport}), r.Replicas, r.Samples, topEvents(r.WaitEvents, 5))
	}
	for _, r := range rep.Runs {
		for _, pr := range r.Problems {
			p.printf("\nPROBLEM (%s, %d replicas): %s", transportName(EngineRun{Transport: r.Transport}), r.Replicas, pr)
		}
	}
	p.printf("\nexactly-once: %s\n", okText(rep.ExactlyOnce))
	return p.err
}

// spread is "min–max" of the messages the replicas applied.
func spread(per []int64) string {
	if len(per) == 0 {
		return "-"
	}
	return fmt.Sprintf("%d–%d", slices.Min(per), slices.Max(per))
}

// topEvents is the n most sampled wait events, "CPU 61%, IO:WALSync 20%".
func topEvents(ev map[string]int, n int) string {
	total := 0
	for _, c := range ev {
		total += c
	}
	if total == 0 {
		return "no active backend sampled"
	}
	keys := slices.SortedFunc(maps.Keys(ev), func(a, b string) int { return cmp.Or(cmp.Compare(ev[b], ev[a]), cmp.Compare(a, b)) })
	var parts []string
	for _, k := range keys[:min(n, len(keys))] {
		parts = append(parts, fmt.Sprintf("%s %.0f%%", k, 100*float64(ev[k])/float64(total)))
	}
	return strings.Join(parts, ", ")
}

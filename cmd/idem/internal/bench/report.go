package bench

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteText prints the report as tables.
func (rep *Report) WriteText(w io.Writer) error {
	p := &errWriter{w: w}
	p.printf("idem bench, %s\n", rep.Date)
	p.printf("client:   %s, %s; load average %.2f at the start\n", rep.Machine, rep.Go, rep.LoadBefore)
	p.printf("server:   PostgreSQL %s\n", rep.Server)
	p.printf("workload: %d deliveries = %d distinct Increment messages + %d duplicates (%.0f%%), %d counter sagas, seed %d;\n",
		rep.Messages, rep.Distinct, rep.Duplicates, 100*float64(rep.Duplicates)/float64(max(rep.Messages, 1)), rep.Keys, rep.Seed)
	p.printf("          every transition writes the instance, an inbox record and one emitted message\n")
	if rep.UnsafeCommit {
		p.printf("WARNING:  --allow-unsafe-commit: commits may not be durable; these numbers are not comparable\n")
	}
	p.printf("\nBaselines: straight SQL over pgx on Idem's tables (transitions/s = distinct messages applied per second)\n\n")
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "baseline\tclients\tmsgs/tx\ttransitions/s\tdeliveries/s\tround trips/msg\tretries\texactly-once\t")
	for _, b := range rep.Baselines {
		fmt.Fprintf(tw, "(%s) %s\t%d\t%d\t%.0f\t%.0f\t%.2f\t%d\t%s\t\n",
			b.Name, b.Description, b.Clients, b.PerTransaction, b.TransitionsPerSec, b.DeliveriesPerSec, b.RoundTripsPerMsg, b.Retries, okText(b.ExactlyOnce))
	}
	_ = tw.Flush()

	lat := fmt.Sprintf("p50/p99 from publish to commit under a producer paced at %.0f%% of that rate", 100*rep.LatencyLoad)
	if rep.LatencyLoad == 0 {
		lat = "latency phase skipped"
	}
	p.printf("\nIdem: pgstore as store and queue (pg queue), or as store beside a broker (inbox + outbox relay; the broker drops\n")
	p.printf("re-published IDs in its dedup window, and round trips count PostgreSQL only) (transitions/s: queue pre-filled with the whole stream; %s)\n\n", lat)
	tw = tabwriter.NewWriter(p, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "transport\tconfig\tclaim\tbatch\tlanes\tconsumers\ttransitions/s\tp50 ms\tp99 ms\tround trips/msg\t× (a)\t× (b)\tclaimed in tx\tclaim→commit p50/p99 ms\tpeak RSS MiB\texactly-once\t")
	for _, r := range rep.Runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%.0f\t%s\t%s\t%.3f\t%.2f\t%.2f\t%.0f%%\t%.1f / %.1f\t%.0f\t%s\t\n",
			transportName(r), configLabel(r), claimText(r), r.Batch, r.Lanes, r.Consumers, r.TransitionsPerSec, latText(r, r.P50Ms), latText(r, r.P99Ms), r.RoundTripsPerMsg, r.RatioA, r.RatioB,
			100*float64(r.ClaimedInTx)/float64(max(rep.Messages, 1)), r.ClaimP50Ms, r.ClaimP99Ms, r.PeakRSSMiB, okText(r.ExactlyOnce))
	}
	_ = tw.Flush()
	rep.writeScale(p)

	p.printf("\nWhere the throughput phase's time went: mean ms per receive and per unit of work (one per lane per batch)\n\n")
	tw = tabwriter.NewWriter(p, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "transport\tclaim\tbatch\tlanes\tconsumers\tunits of work/batch\treceive\tpool wait\tload\tapply (Go)\tcommit\t")
	for _, r := range rep.Runs {
		b := r.Breakdown
		per := func(total float64, n int64) string {
			if n == 0 {
				return "-"
			}
			return fmt.Sprintf("%.2f", 1000*total/float64(n))
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.1f\t%s\t%s\t%s\t%s\t%s\t\n", transportName(r), claimText(r), r.Batch, r.Lanes, r.Consumers, float64(b.UnitsOfWork)/float64(max(b.Receives, 1)),
			per(b.ReceiveSec, b.Receives), per(b.BeginSec, b.UnitsOfWork), per(b.LoadSec, b.UnitsOfWork), per(b.ApplySec, b.UnitsOfWork), per(b.CommitSec, b.UnitsOfWork))
	}
	_ = tw.Flush()

	rep.writeCost(p)
	rep.writeCPU(p)

	if t := rep.Target; t.Evaluated {
		p.printf("\nTarget at batch %d (≥ 5× a, ≥ 0.5× b, < 0.2 round trips/msg), best: lanes %d: %.2f× a %s, %.2f× b %s, %.3f round trips/msg %s: %s\n",
			t.Batch, t.Lanes, t.RatioA, mark(t.MetA), t.RatioB, mark(t.MetB), t.RoundTripsPerMsg, mark(t.MetRoundTrips), metText(t.Met))
	}
	var problems []string
	for _, b := range rep.Baselines {
		for _, pr := range b.Problems {
			problems = append(problems, fmt.Sprintf("baseline (%s): %s", b.Name, pr))
		}
	}
	for _, r := range rep.Runs {
		for _, pr := range r.Problems {
			problems = append(problems, fmt.Sprintf("%s %s: %s", transportName(r), configName(r), pr))
		}
	}
	if len(problems) > 0 {
		p.printf("\nEXACTLY-ONCE VIOLATED:\n  %s\n", strings.Join(problems, "\n  "))
	}
	return p.err
}

// transportName names a run's transport: "pg queue" for pgstore as store
// and queue; "+trace" marks a traced run, "+token" a run of the token
// inbox (Config.Dedup = DedupToken).
func transportName(r EngineRun) string {
	name := r.Transport
	if name == "" {
		name = "pg queue"
	}
	if r.Traced {
		name += " +trace"
	}
	if r.token() {
		name += " +token"
	}
	return name
}

func latText(r EngineRun, v float64) string {
	if r.LatencyMessages == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", v)
}

func okText(ok bool) string {
	if ok {
		return "ok"
	}
	return "VIOLATED"
}

func mark(ok bool) string {
	if ok {
		return "(met)"
	}
	return "(missed)"
}

func metText(ok bool) string {
	if ok {
		return "MET"
	}
	return "NOT MET"
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }

// configLabel is the report's config column: "defaults" for the zero
// Config's run, "set" for a run of the flags' batch and lanes.
func configLabel(r EngineRun) string {
	if r.Defaults {
		return "defaults"
	}
	if r.Partitioned {
		return "set, partitioned"
	}
	return "set"
}

// claimText is the report's claim column: "lease" or "tx", "-" on a broker.
func claimText(r EngineRun) string {
	if r.Claim == "" {
		return "-"
	}
	return r.Claim
}

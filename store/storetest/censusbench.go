package storetest

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/idemhq/idem/deploycheck"
	"github.com/idemhq/idem/internal/sqlq"
	"github.com/idemhq/idem/saga"
)

// The deploy check's benchmarks (BenchmarkDeployCheck in pgstore and
// sqlitestore) share what they check against and how they report.

// CensusBenchMachines describe machines that serve all of the
// benchmark's data: every state handles both events, and schema version
// 1 upgrades to 2.
func CensusBenchMachines() []saga.Description {
	states := []saga.State{"Placed", "Paid", "Packed", "Shipped", "Delivered", "Held"}
	var ms []saga.Description
	for _, typ := range []string{"order", "payment", "shipment"} {
		d := saga.Description{Name: typ, SchemaVersion: 2, Upgrades: []int{1}, Unhandled: "error", NotFound: "ignore",
			Attributes: []string{"customer", "region"}, States: []saga.StateDescription{{Name: "Done", Final: true}}}
		for _, st := range states {
			d.States = append(d.States, saga.StateDescription{Name: st})
		}
		for _, ev := range []string{typ + ".Advance", typ + ".Timeout"} {
			d.Events = append(d.Events, saga.EventDescription{Type: ev, HandledIn: states})
		}
		ms = append(ms, d)
	}
	return ms
}

// CheckCensusReport fails b unless r found no hazard and counted what
// the stores' census benchmarks wrote for n live sagas.
func CheckCensusReport(b *testing.B, r *deploycheck.Report, n int) {
	b.Helper()
	if !r.OK() {
		b.Fatalf("the check of matching machines found hazards: %v", r.Error())
	}
	var live, timers, msgs, attrs int64
	for _, c := range r.Live {
		live += c
	}
	for _, t := range r.Census.Timers {
		timers += t.Count
	}
	for _, m := range r.Census.Messages {
		msgs += m.Count
	}
	for _, a := range r.Census.Attributes {
		attrs += a.Count
	}
	groups := map[[3]int]bool{}
	wantTimers := int64(0)
	for g := 1; g <= n; g++ {
		groups[[3]int{g % 3, g / 3 % 6, min(g%5, 1)}] = true
		if g%10 < 3 {
			wantTimers++
		}
	}
	got := []int64{live, int64(len(r.Census.States)), timers, msgs, attrs}
	want := []int64{int64(n), int64(len(groups)), wantTimers, 2 * min(int64(n), 10_000), 2 * int64((n+n/5)/2)}
	if !slices.Equal(got, want) {
		b.Fatalf("census (live, state groups, timers, messages, attribute values) = %v, want %v", got, want)
	}
}

// ReportChecks reports the checks' median, lowest and highest seconds.
func ReportChecks(b *testing.B, took []time.Duration, n int) {
	slices.Sort(took)
	b.ReportMetric(took[len(took)/2].Seconds(), "s/check")
	b.ReportMetric(took[0].Seconds(), "min-s/check")
	b.ReportMetric(took[len(took)-1].Seconds(), "max-s/check")
	b.ReportMetric(float64(n), "sagas")
	b.Logf("checks of %d sagas took %v", n, took)
}

// BenchSagas is IDEM_BENCH_SAGAS, or 10,000: how many live sagas a census
// benchmark fills.
func BenchSagas(b *testing.B) int {
	v := os.Getenv("IDEM_BENCH_SAGAS")
	if v == "" {
		return 10_000
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		b.Fatalf("IDEM_BENCH_SAGAS=%q: want a positive number of sagas, such as 1000000", v)
	}
	return n
}

// TimeCensusQueries runs each of the census's queries alone with run and
// reports its time; with IDEM_BENCH_EXPLAIN=1 it also logs explain's plan
// of each.
func TimeCensusQueries(b *testing.B, qs []sqlq.CensusQuery, run func(sql string) error, explain func(sql string) string) {
	for _, q := range qs {
		started := time.Now()
		if err := run(q.SQL); err != nil {
			b.Fatalf("census query %s: %v", q.What, err)
		}
		d := time.Since(started)
		b.ReportMetric(d.Seconds(), q.What+"-s")
		if os.Getenv("IDEM_BENCH_EXPLAIN") == "1" {
			b.Logf("census query %s (%s):\n%s", q.What, d.Round(time.Millisecond), explain(q.SQL))
		}
	}
}

package idem

import (
	"context"
	"io"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

// BenchmarkEngineObserved is BenchmarkEngine with Config.Observe set to
// an observer like admin.Observer's: histograms of each unit of work's
// duration and size and, with publish_to_commit=true, of each applied
// message's publish-to-commit latency. The two alternate when run with
// -count, so that they share the machine's conditions.
//
//	go test -run '^$' -bench BenchmarkEngineObserved -benchmem -count 6 .
func BenchmarkEngineObserved(b *testing.B) {
	for _, batch := range []int{1, 16} {
		for _, withPTC := range []bool{false, true} {
			b.Run("batch="+strconv.Itoa(batch)+"/publish_to_commit="+strconv.FormatBool(withPTC), func(b *testing.B) {
				uow := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "uow", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15)})
				size := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "size", Buckets: prometheus.ExponentialBuckets(1, 2, 10)})
				ptc := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ptc", Buckets: prometheus.ExponentialBuckets(0.001, 2, 20)})
				observe := func(ob Observation) {
					uow.Observe(ob.Duration.Seconds())
					size.Observe(float64(ob.Messages))
					if withPTC {
						benchPublishToCommit(ob, ptc)
					}
				}
				benchEngineWith(b, batch, observe)
			})
		}
	}
}

// benchPublishToCommit feeds ob's publish-to-commit latencies to h.
func benchPublishToCommit(ob Observation, h prometheus.Histogram) {
	ob.PublishToCommit(func(d time.Duration) bool {
		h.Observe(d.Seconds())
		return true
	})
}

// benchEngineWith is benchEngine with Config.Observe set to observe.
func benchEngineWith(b *testing.B, batch int, observe func(Observation)) {
	ctx := context.Background()
	st := memstore.New(nil)
	mt := memtransport.New(&memtransport.Config{Lease: time.Minute})
	defer mt.Close()
	e, err := NewEngine(st, &dropPublished{mt}, &Config{BatchSize: batch, Observe: observe, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if err := e.Register(benchMachine()); err != nil {
		b.Fatal(err)
	}
	envs := make([]Envelope, b.N)
	for i := range envs {
		envs[i], _ = e.NewEnvelope("m-"+strconv.Itoa(i), benchInc{Key: "k-" + strconv.Itoa(i%1024)})
		envs[i].SentAt = time.Now()
	}
	if err := mt.Publish(ctx, envs); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	if err := e.Start(ctx); err != nil {
		b.Fatal(err)
	}
	for mt.Unsettled() > 0 {
		time.Sleep(50 * time.Microsecond) // polling a condition
	}
	elapsed := time.Since(start)
	b.StopTimer()
	if err := e.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	if got := e.Stats().Applied; got != int64(b.N) {
		b.Fatalf("applied %d, want %d", got, b.N)
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "transitions/s")
}

// BenchmarkObserve measures Config.Observe's share of one committed unit
// of work of 16 applied messages: an observer of the duration and size
// only (as before idem_publish_to_commit_seconds), and one that also
// feeds each message's publish-to-commit latency. One op is one unit of
// work.
//
//	go test -run '^$' -bench BenchmarkObserve -benchmem .
func BenchmarkObserve(b *testing.B) {
	sent := time.Now()
	var a attempt
	for i := range 16 {
		it := &item{typ: "bench"}
		it.d.Envelope = Envelope{ID: "m-" + strconv.Itoa(i), SentAt: sent}
		a.items = append(a.items, it)
		a.results = append(a.results, result{it: it, o: outcome{kind: OutcomeApplied}})
	}
	uow := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "uow", Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15)})
	ptc := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ptc", Buckets: prometheus.ExponentialBuckets(0.001, 2, 20)})
	for _, withPTC := range []bool{false, true} {
		b.Run("publish_to_commit="+strconv.FormatBool(withPTC), func(b *testing.B) {
			f := observeFunc{fn: func(ob Observation) {
				uow.Observe(ob.Duration.Seconds())
				if withPTC {
					benchPublishToCommit(ob, ptc)
				}
			}}
			b.ReportAllocs()
			for b.Loop() {
				f.committed(&a, time.Millisecond, 1)
			}
		})
	}
}

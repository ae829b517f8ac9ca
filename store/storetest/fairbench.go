package storetest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// FairLoad is the workload of FairShareLatency.
type FairLoad struct {
	// Flood is how many messages of the flooding tenant are queued ahead
	// of the quiet tenant's (0: the quiet tenant alone).
	Flood int
	// Quiet is how many messages the quiet tenant sends, one every Every.
	Quiet int
	Every time.Duration
	// Fair receives in fair order; otherwise in the queue's.
	Fair bool
	// Batch is the receive's Max, and Work the time each message takes
	// to handle (the consumer sleeps it: a call to a remote service).
	Batch int
	Work  time.Duration
}

// FairShareLatency runs load on q, one consumer receiving through
// ReceiveAdmitted and acknowledging, and returns the quiet tenant's
// latencies (from its publish to its receipt), sorted.
func FairShareLatency(tb testing.TB, q store.AdmittingQueue, load FairLoad) []time.Duration {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if load.Fair { // the first fair receive builds the store's indexes: not measured
		wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
		_, _ = q.ReceiveAdmitted(wctx, &store.ReceiveParams{Max: 1, Fair: true})
		wcancel()
	}
	var flood []transport.Envelope
	for i := range load.Flood {
		env := message(fmt.Sprint("flood-", i), fmt.Sprint("f-", i))
		env.Headers[transport.HeaderFairnessKey] = "flood"
		flood = append(flood, env)
	}
	for len(flood) > 0 {
		n := min(len(flood), 500)
		if err := q.Publish(ctx, flood[:n]); err != nil {
			tb.Fatal(err)
		}
		flood = flood[n:]
	}
	var mu sync.Mutex
	sent := map[string]time.Time{}
	var lat []time.Duration
	done := make(chan error, 1)
	go func() {
		for {
			ds, err := q.ReceiveAdmitted(ctx, &store.ReceiveParams{Max: load.Batch, Fair: load.Fair})
			if err != nil {
				done <- err
				return
			}
			at := time.Now()
			mu.Lock()
			for _, d := range ds {
				if t, ok := sent[d.Envelope.ID]; ok {
					lat = append(lat, at.Sub(t))
				}
			}
			finished := len(lat) == load.Quiet
			mu.Unlock()
			time.Sleep(time.Duration(len(ds)) * load.Work)
			if err := q.Ack(ctx, ds); err != nil {
				done <- err
				return
			}
			if finished {
				done <- nil
				return
			}
		}
	}()
	tick := time.NewTicker(load.Every)
	defer tick.Stop()
	for i := range load.Quiet {
		env := message(fmt.Sprint("quiet-", i), fmt.Sprint("q-", i))
		env.Headers[transport.HeaderFairnessKey] = "quiet"
		mu.Lock()
		sent[env.ID] = time.Now()
		mu.Unlock()
		if err := q.Publish(ctx, []transport.Envelope{env}); err != nil {
			tb.Fatal(err)
		}
		<-tick.C
	}
	if err := <-done; err != nil {
		tb.Fatal(err)
	}
	slices.Sort(lat)
	return lat
}

// Quantile is the q-quantile (0 to 1) of sorted latencies.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(q*float64(len(sorted))), len(sorted)-1)]
}

// BenchFairShare reports the quiet tenant's p50 and p99 latency (ms) in
// three runs of one load, each on a queue from open: the quiet tenant
// alone, behind a flood in the queue's order, and behind the flood in
// fair order; and the ratio of the last p99 to the first.
func BenchFairShare(b *testing.B, open func(testing.TB) store.AdmittingQueue, flood int) {
	base := FairLoad{Quiet: 100, Every: 20 * time.Millisecond, Batch: 16, Work: 200 * time.Microsecond}
	runs := []struct {
		name  string
		flood int
		fair  bool
	}{{"alone", 0, true}, {"flood-fifo", flood, false}, {"flood-fair", flood, true}}
	for range b.N {
		p99 := map[string]time.Duration{}
		for _, r := range runs {
			l := base
			l.Flood, l.Fair = r.flood, r.fair
			lat := FairShareLatency(b, open(b), l)
			p99[r.name] = Quantile(lat, 0.99)
			b.ReportMetric(float64(Quantile(lat, 0.5).Microseconds())/1000, r.name+"-p50-ms")
			b.ReportMetric(float64(p99[r.name].Microseconds())/1000, r.name+"-p99-ms")
		}
		b.ReportMetric(float64(p99["flood-fair"])/float64(p99["alone"]), "fair/alone-p99")
	}
}

package admin

import (
	"math"
	"sync"
	"testing"
	"time"

	"github.com/idemhq/idem"
)

// fakeEngine is what a fake-clocked charts reads: counters and latency
// buckets the test sets.
type fakeEngine struct {
	mu      sync.Mutex
	stats   idem.Stats
	lat     []uint64
	stopped bool
}

func (f *fakeEngine) running() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.stopped
}

func (f *fakeEngine) read(now time.Time, dst []uint64) chartReading {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lat == nil {
		f.lat = make([]uint64, len(latencyBuckets)+1)
	}
	return chartReading{at: now, stats: f.stats, lat: append(dst[:0], f.lat...)}
}

// observe adds n observations of d seconds to the cumulative buckets.
func (f *fakeEngine) observe(d float64, n uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lat == nil {
		f.lat = make([]uint64, len(latencyBuckets)+1)
	}
	for i, b := range latencyBuckets {
		if d <= b {
			f.lat[i] += n
		}
	}
	f.lat[len(latencyBuckets)] += n
}

func fakeCharts() (*charts, *fakeEngine) {
	f := &fakeEngine{}
	return &charts{read: f.read, alive: f.running, interval: chartInterval, idle: chartIdle}, f
}

var t0 = time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)

func TestChartRatesFromDeltas(t *testing.T) {
	c, f := fakeCharts()
	f.stats = idem.Stats{Applied: 1000, Retries: 7, DeadLettered: 3} // before the sampler started
	c.sample(t0)
	if s := c.series(); len(s.Time) != 0 {
		t.Fatalf("after the baseline: %d points, want none (a rate needs two readings)", len(s.Time))
	}
	f.stats = idem.Stats{Applied: 1050, Retries: 17, DeadLettered: 8}
	c.sample(t0.Add(10 * time.Second))
	s := c.series()
	if len(s.Time) != 1 || s.Applied[0] != 5 || s.Retried[0] != 1 || s.DeadLettered[0] != 0.5 {
		t.Fatalf("series %+v: want one point of 5 applied/s, 1 retried/s, 0.5 dead-lettered/s", s)
	}
	if s.Time[0] != float64(t0.Add(10*time.Second).Unix()) || s.IntervalSeconds != 10 || s.Capacity != 360 {
		t.Errorf("time %v, interval %v, capacity %d: want the point's end, 10 and 360", s.Time, s.IntervalSeconds, s.Capacity)
	}
}

func TestChartRingWrapsAndIsBounded(t *testing.T) {
	c, f := fakeCharts()
	const n = 1000
	for i := range n {
		f.stats.Applied = int64(i * i) // the rate of interval i is (2i-1)/10
		c.sample(t0.Add(time.Duration(i) * 10 * time.Second))
	}
	s := c.series()
	if len(s.Time) != chartPoints || len(s.Applied) != chartPoints || len(s.LatencyP99) != chartPoints {
		t.Fatalf("%d points after %d samples, want the last %d", len(s.Time), n, chartPoints)
	}
	for j, at := range s.Time {
		i := n - chartPoints + j
		if want := float64(t0.Add(time.Duration(i) * 10 * time.Second).Unix()); at != want {
			t.Fatalf("point %d at %v, want %v (oldest first, the newest kept)", j, at, want)
		}
		if want := float64(2*i-1) / 10; s.Applied[j] != want {
			t.Fatalf("point %d: %v applied/s, want %v", j, s.Applied[j], want)
		}
	}
}

func TestChartLatencySummary(t *testing.T) {
	c, f := fakeCharts()
	c.sample(t0)
	f.observe(0.003, 98) // in the bucket (0.002, 0.004]
	f.observe(2, 2)      // in the bucket (1.024, 2.048]
	c.sample(t0.Add(10 * time.Second))
	c.sample(t0.Add(20 * time.Second)) // nothing committed
	f.observe(100, 1)                  // above the last bound
	c.sample(t0.Add(30 * time.Second))
	s := c.series()
	if len(s.LatencyP50) != 3 {
		t.Fatalf("%d latency points, want 3", len(s.LatencyP50))
	}
	if p := s.LatencyP50[0]; p == nil || *p <= 0.002 || *p > 0.004 {
		t.Errorf("p50 of the first interval: %v, want within (0.002, 0.004]", deref64(p))
	}
	if p := s.LatencyP99[0]; p == nil || *p <= 1.024 || *p > 2.048 {
		t.Errorf("p99 of the first interval: %v, want within (1.024, 2.048]", deref64(p))
	}
	if s.LatencyP50[1] != nil || s.LatencyP99[1] != nil {
		t.Errorf("an interval without commits has latency %v/%v, want null", deref64(s.LatencyP50[1]), deref64(s.LatencyP99[1]))
	}
	if last := latencyBuckets[len(latencyBuckets)-1]; s.LatencyP99[2] == nil || *s.LatencyP99[2] != last {
		t.Errorf("p99 above the last bound: %v, want the last bound %v", deref64(s.LatencyP99[2]), last)
	}
}

func deref64(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// The sampler samples at every tick while someone asks, and stops (and
// forgets its baseline) once nobody asked for chartIdle.
func TestChartSamplerStopsWhenIdle(t *testing.T) {
	c, f := fakeCharts()
	c.asked, c.running = t0, true
	c.sample(t0)
	// The ticks are queued and then closed: a loop that does not stop by
	// itself ends with the channel, and the checks below fail, never hang.
	tick := make(chan time.Time, 4)
	stopped := make(chan struct{})
	f.stats.Applied = 20
	tick <- t0.Add(10 * time.Second)
	tick <- t0.Add(chartIdle) // the last sample: asked exactly chartIdle ago
	tick <- t0.Add(chartIdle + time.Second)
	tick <- t0.Add(chartIdle + 2*time.Second)
	close(tick)
	go c.loop(tick, func() { close(stopped) })
	<-stopped
	s := c.series()
	if len(s.Time) != 2 || s.Applied[0] != 2 {
		t.Fatalf("series %+v: want two points, the first 2 applied/s", s)
	}
	c.mu.Lock()
	running, started := c.running, c.started
	c.mu.Unlock()
	if running || started {
		t.Errorf("after the idle spell: running %v, baseline %v; want the sampler stopped and the baseline dropped", running, started)
	}
}

// The sampler stops with the engine, however recently someone asked.
func TestChartSamplerStopsWithEngine(t *testing.T) {
	c, f := fakeCharts()
	c.asked, c.running = t0, true
	c.sample(t0)
	f.mu.Lock()
	f.stopped = true
	f.mu.Unlock()
	tick := make(chan time.Time, 2)
	tick <- t0.Add(10 * time.Second)
	tick <- t0.Add(20 * time.Second)
	close(tick)
	stopped := make(chan struct{})
	go c.loop(tick, func() { close(stopped) })
	<-stopped
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running || c.ring.n != 0 {
		t.Errorf("after the engine stopped: running %v, %d points sampled; want the sampler stopped at the first tick", c.running, c.ring.n)
	}
}

// The real sampler reads the Observer's histogram.
func TestChartReadsObserver(t *testing.T) {
	o := NewObserver()
	read := uowHistogram(o)
	before := read(nil)
	for range 10 {
		o.Observe(idem.Observation{Duration: 3 * time.Millisecond})
	}
	after := read(nil)
	if len(after) != len(latencyBuckets)+1 || after[len(after)-1]-before[len(before)-1] != 10 {
		t.Fatalf("buckets %v then %v: want %d counts and 10 more observations", before, after, len(latencyBuckets)+1)
	}
	if q := quantile(0.5, latencyBuckets, before, after); q <= 0.002 || q > 0.004 {
		t.Errorf("p50 of ten 3ms units of work: %v, want within (0.002, 0.004]", q)
	}
}

// BenchmarkChartSample is the sampler's cost every 10 s: the engine's
// counters, the histogram's buckets, one point.
func BenchmarkChartSample(b *testing.B) {
	o := NewObserver()
	for i := range 1000 {
		o.Observe(idem.Observation{Duration: time.Duration(i) * time.Microsecond})
	}
	uow := uowHistogram(o)
	c := &charts{interval: chartInterval, idle: chartIdle, read: func(now time.Time, lat []uint64) chartReading {
		return chartReading{at: now, lat: uow(lat[:0])}
	}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		c.sample(t0.Add(time.Duration(i) * chartInterval))
	}
}

// BenchmarkChartSeries is the cost of a full hour's answer.
func BenchmarkChartSeries(b *testing.B) {
	c, _ := fakeCharts()
	for i := range chartPoints + 1 {
		c.sample(t0.Add(time.Duration(i) * chartInterval))
	}
	b.ReportAllocs()
	for b.Loop() {
		if s := c.series(); len(s.Time) != chartPoints {
			b.Fatalf("%d points", len(s.Time))
		}
	}
}

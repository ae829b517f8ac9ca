package admin

import (
	"math"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
)

// The overview's charts: one point every chartInterval, the last
// chartPoints of them (an hour), kept in a fixed array whatever the load.
const (
	chartInterval = 10 * time.Second
	chartPoints   = 360
	// chartIdle is how long the sampler runs after the last overview page
	// or series request; then it stops, and the next request starts it
	// again. A Server nobody looks at runs no goroutine.
	chartIdle = 15 * time.Minute
)

// chartPoint is one interval: rates per second over it, and the p50 and
// p99 of the units of work committed in it (NaN when none was).
type chartPoint struct {
	at                             time.Time
	applied, deadLettered, retried float64
	p50, p99                       float64
}

// chartRing holds the newest chartPoints points in a fixed array.
type chartRing struct {
	buf  [chartPoints]chartPoint
	next int // where the next point goes
	n    int // how many are held
}

func (r *chartRing) add(p chartPoint) {
	r.buf[r.next] = p
	r.next = (r.next + 1) % len(r.buf)
	r.n = min(r.n+1, len(r.buf))
}

// each calls fn on the points held, oldest first.
func (r *chartRing) each(fn func(chartPoint)) {
	start := (r.next - r.n + len(r.buf)) % len(r.buf)
	for i := range r.n {
		fn(r.buf[(start+i)%len(r.buf)])
	}
}

// chartReading is what one sample reads: the engine's counters and the
// cumulative bucket counts of idem_unit_of_work_seconds, one per bound of
// latencyBuckets and last the count of all (the +Inf bucket).
type chartReading struct {
	at    time.Time
	stats idem.Stats
	lat   []uint64
}

// charts samples the engine into a chartRing. Its methods are safe for
// concurrent use.
type charts struct {
	read     func(now time.Time, lat []uint64) chartReading
	alive    func() bool // false once the engine stopped: the sampler stops too
	interval time.Duration
	idle     time.Duration

	mu      sync.Mutex
	ring    chartRing
	prev    chartReading
	spare   []uint64 // the bucket slice of the reading before prev, reused
	started bool     // prev holds a baseline
	running bool     // a sampler goroutine runs
	asked   time.Time
}

func newCharts(e *idem.Engine, o *Observer) *charts {
	uow := uowHistogram(o)
	return &charts{
		interval: chartInterval, idle: chartIdle,
		alive: func() bool { return e.Ready() == nil },
		read: func(now time.Time, lat []uint64) chartReading {
			return chartReading{at: now, stats: e.Stats(), lat: uow(lat[:0])}
		},
	}
}

// touch notes that someone looked at now, and starts the sampler when it
// is not running: it takes a baseline at once and a point every interval.
func (c *charts) touch(now time.Time) {
	c.mu.Lock()
	c.asked = now
	if c.running {
		c.mu.Unlock()
		return
	}
	c.running = true
	interval := c.interval
	c.mu.Unlock()
	c.sample(now)
	t := time.NewTicker(interval)
	go c.loop(t.C, t.Stop)
}

// loop samples at every tick until nobody has asked for idle, or the
// engine stopped; then it calls stop and returns. The next touch starts afresh, so a point never
// averages over the idle spell.
func (c *charts) loop(tick <-chan time.Time, stop func()) {
	defer stop()
	for now := range tick {
		c.mu.Lock()
		if now.Sub(c.asked) > c.idle || !c.alive() {
			c.running, c.started = false, false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		c.sample(now)
	}
}

// sample reads the engine at now and records the point since the last
// reading.
func (c *charts) sample(now time.Time) {
	c.mu.Lock()
	buf := c.spare
	c.spare = nil
	c.mu.Unlock()
	c.record(c.read(now, buf))
}

// record adds the point from the previous reading to cur, or makes cur
// the baseline when there is none (or the clock went backwards).
func (c *charts) record(cur chartReading) {
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.prev
	c.prev, c.spare = cur, prev.lat
	dt := cur.at.Sub(prev.at).Seconds()
	if !c.started || dt <= 0 {
		c.started = true
		return
	}
	per := func(a, b int64) float64 { return float64(a-b) / dt }
	c.ring.add(chartPoint{
		at:      cur.at,
		applied: per(cur.stats.Applied, prev.stats.Applied), retried: per(cur.stats.Retries, prev.stats.Retries),
		deadLettered: per(cur.stats.DeadLettered, prev.stats.DeadLettered),
		p50:          quantile(0.5, latencyBuckets, prev.lat, cur.lat), p99: quantile(0.99, latencyBuckets, prev.lat, cur.lat),
	})
}

// quantile estimates the q-quantile of the observations between two
// readings of a histogram's cumulative counts (one per bound, then the
// total), interpolating inside a bucket as Prometheus' histogram_quantile
// does. It is NaN when nothing was observed in between; an observation
// above the last bound counts as the last bound.
func quantile(q float64, bounds []float64, before, after []uint64) float64 {
	if len(after) != len(bounds)+1 || len(before) != len(after) {
		return math.NaN()
	}
	delta := func(i int) float64 { return float64(after[i] - before[i]) }
	total := delta(len(bounds))
	if total <= 0 {
		return math.NaN()
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, upper := range bounds {
		n := delta(i)
		if n >= rank && n > below {
			return lower + (upper-lower)*(rank-below)/(n-below)
		}
		lower, below = upper, n
	}
	return bounds[len(bounds)-1]
}

// uowHistogram returns a function that appends the cumulative bucket
// counts of o's idem_unit_of_work_seconds, and its count, to dst. It
// reads through a registry of its own holding only that histogram: the
// Observer records nothing more per message for the charts.
func uowHistogram(o *Observer) func(dst []uint64) []uint64 {
	reg := prometheus.NewRegistry()
	reg.MustRegister(uowCollector{o.uow})
	return func(dst []uint64) []uint64 {
		mfs, err := reg.Gather()
		if err != nil || len(mfs) != 1 || len(mfs[0].GetMetric()) != 1 {
			return dst
		}
		h := mfs[0].GetMetric()[0].GetHistogram()
		for _, b := range h.GetBucket() {
			dst = append(dst, b.GetCumulativeCount())
		}
		return append(dst, h.GetSampleCount())
	}
}

// uowCollector collects one histogram.
type uowCollector struct{ h prometheus.Histogram }

func (u uowCollector) Describe(ch chan<- *prometheus.Desc) { u.h.Describe(ch) }
func (u uowCollector) Collect(ch chan<- prometheus.Metric) { u.h.Collect(ch) }

// Series is the answer of GET /api/overview/series (and of the console's
// GET /overview/series): the overview's charts,
// one point every IntervalSeconds over the last hour at most, oldest
// first. All slices have the same length, at most Capacity. Rates are per
// second over the interval ending at the point's time; latencies are in
// seconds, null for an interval in which no unit of work committed.
type Series struct {
	IntervalSeconds float64 `json:"interval_seconds"`
	Capacity        int     `json:"capacity"`
	// Time is each point's end, in Unix seconds (with milliseconds).
	Time         []float64  `json:"t"`
	Applied      []float64  `json:"applied"`
	Retried      []float64  `json:"retried"`
	DeadLettered []float64  `json:"dead_lettered"`
	LatencyP50   []*float64 `json:"commit_latency_p50_seconds"`
	LatencyP99   []*float64 `json:"commit_latency_p99_seconds"`
}

// series copies the points held.
func (c *charts) series() *Series {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.ring.n
	s := &Series{
		IntervalSeconds: c.interval.Seconds(), Capacity: len(c.ring.buf),
		Time: make([]float64, 0, n), Applied: make([]float64, 0, n), Retried: make([]float64, 0, n), DeadLettered: make([]float64, 0, n),
		LatencyP50: make([]*float64, 0, n), LatencyP99: make([]*float64, 0, n),
	}
	c.ring.each(func(p chartPoint) {
		s.Time = append(s.Time, float64(p.at.UnixMilli())/1000)
		s.Applied = append(s.Applied, p.applied)
		s.Retried = append(s.Retried, p.retried)
		s.DeadLettered = append(s.DeadLettered, p.deadLettered)
		s.LatencyP50 = append(s.LatencyP50, number(p.p50))
		s.LatencyP99 = append(s.LatencyP99, number(p.p99))
	})
	return s
}

// number is f, or nil (JSON null) for NaN.
func number(f float64) *float64 {
	if math.IsNaN(f) {
		return nil
	}
	return &f
}

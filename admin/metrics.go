package admin

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
)

// Observer records the duration of every committed unit of work in the
// histogram idem_unit_of_work_seconds. Create it with NewObserver before the
// engine, set its Observe method as idem.Config.Observe, and pass it in
// Config.Observer. Its methods are safe for concurrent use and never block.
type Observer struct {
	uow      prometheus.Histogram
	messages prometheus.Histogram
}

// NewObserver returns an Observer with empty histograms.
func NewObserver() *Observer {
	return &Observer{
		uow: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idem_unit_of_work_seconds",
			Help:    "Time from Begin to the end of Commit of each committed unit of work (the transition latency).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 15), // 0.5ms .. ~8s
		}),
		messages: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idem_unit_of_work_messages",
			Help:    "Deliveries settled by each committed unit of work.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
	}
}

// Observe records one committed unit of work. Its signature is that of
// idem.Config.Observe.
func (o *Observer) Observe(ob idem.Observation) {
	o.uow.Observe(ob.Duration.Seconds())
	o.messages.Observe(float64(ob.Messages))
}

// collector reads the engine's counters and the store's backlog at scrape
// time.
type collector struct {
	e       *idem.Engine
	st      store.Store
	log     *slog.Logger
	timeout time.Duration
	now     func() time.Time

	messages, received, conflicts, retries, stale, emitted, relayed, fired, swept *prometheus.Desc
	backlog, oldest, timerLag, storeUp                                            *prometheus.Desc
}

func newCollector(e *idem.Engine, st store.Store, log *slog.Logger, timeout time.Duration) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &collector{
		e: e, st: st, log: log, timeout: timeout, now: time.Now,
		messages:  d("idem_messages_total", "Messages processed, by result: applied, ignored, duplicate (skipped by the inbox), not_found, dead_lettered.", "result"),
		received:  d("idem_messages_received_total", "Deliveries taken from the transport."),
		conflicts: d("idem_conflicts_total", "Units of work that lost an optimistic-concurrency race and were re-applied."),
		retries:   d("idem_retries_total", "Deliveries returned to the transport for another try."),
		stale:     d("idem_stale_timers_total", "Timer messages dropped because the saga had unscheduled or rescheduled them."),
		emitted:   d("idem_messages_emitted_total", "Messages written to the outbox or queue by transitions."),
		relayed:   d("idem_outbox_relayed_total", "Outbox messages sent by the relay."),
		fired:     d("idem_timers_fired_total", "Timers handed to the transport."),
		swept:     d("idem_sagas_swept_total", "Finished sagas deleted by the sweeper."),
		backlog:   d("idem_outbox_backlog", "Unsent outbox messages."),
		oldest:    d("idem_outbox_oldest_age_seconds", "Age of the oldest unsent outbox message; 0 when none."),
		timerLag:  d("idem_timer_lag_seconds", "How late the earliest pending timer is: now minus its due time; 0 when none is due."),
		storeUp:   d("idem_store_up", "1 when the store answered the last scrape's queries, 0 otherwise."),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.messages, c.received, c.conflicts, c.retries, c.stale, c.emitted,
		c.relayed, c.fired, c.swept, c.backlog, c.oldest, c.timerLag, c.storeUp} {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	s := c.e.Stats()
	counter := func(d *prometheus.Desc, v int64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	counter(c.messages, s.Applied, "applied")
	counter(c.messages, s.Ignored, "ignored")
	counter(c.messages, s.Duplicates, "duplicate")
	counter(c.messages, s.NotFound, "not_found")
	counter(c.messages, s.DeadLettered, "dead_lettered")
	counter(c.received, s.Received)
	counter(c.conflicts, s.Conflicts)
	counter(c.retries, s.Retries)
	counter(c.stale, s.StaleTimers)
	counter(c.emitted, s.Emitted)
	counter(c.relayed, s.Relayed)
	counter(c.fired, s.TimersFired)
	counter(c.swept, s.Swept)

	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	now := c.now()
	up := 1.0
	n, oldest, err := c.st.OutboxBacklog(ctx)
	if err != nil {
		c.log.Warn("metrics: read the outbox backlog", "error", err)
		up = 0
	} else {
		gauge(c.backlog, float64(n))
		age := 0.0
		if !oldest.IsZero() && now.After(oldest) {
			age = now.Sub(oldest).Seconds()
		}
		gauge(c.oldest, age)
	}
	ts, err := c.st.ListTimers(ctx, &store.ListParams{Limit: 1})
	if err != nil {
		c.log.Warn("metrics: read the earliest timer", "error", err)
		up = 0
	} else {
		lag := 0.0
		if len(ts) > 0 && now.After(ts[0].DueAt) {
			lag = now.Sub(ts[0].DueAt).Seconds()
		}
		gauge(c.timerLag, lag)
	}
	gauge(c.storeUp, up)
}

package admin

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// Observer records the duration of every committed unit of work in the
// histograms idem_unit_of_work_seconds and, by saga type,
// idem_transition_seconds. Create it with NewObserver before the engine, set
// its Observe method as idem.Config.Observe, and pass it in Config.Observer.
// It is a prometheus.Collector of its histograms. Its methods are safe for
// concurrent use and never block.
type Observer struct {
	uow        prometheus.Histogram
	messages   prometheus.Histogram
	transition *prometheus.HistogramVec
}

var _ prometheus.Collector = (*Observer)(nil)

// latencyBuckets span 0.5ms to about 8s.
var latencyBuckets = prometheus.ExponentialBuckets(0.0005, 2, 15)

// NewObserver returns an Observer with empty histograms.
func NewObserver() *Observer {
	return &Observer{
		uow: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idem_unit_of_work_seconds",
			Help:    "Time from Begin to the end of Commit of each committed unit of work (the transition latency).",
			Buckets: latencyBuckets,
		}),
		messages: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idem_unit_of_work_messages",
			Help:    "Deliveries settled by each committed unit of work.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 10),
		}),
		transition: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "idem_transition_seconds",
			Help:    "Time from Begin to the end of Commit of each committed unit of work, once for each saga type among its messages.",
			Buckets: latencyBuckets,
		}, []string{"saga_type"}),
	}
}

// Describe implements prometheus.Collector.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.uow.Describe(ch)
	o.messages.Describe(ch)
	o.transition.Describe(ch)
}

// Collect implements prometheus.Collector.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.uow.Collect(ch)
	o.messages.Collect(ch)
	o.transition.Collect(ch)
}

// typeLabel is the saga_type label of a type: "none" for messages refused
// before their saga was known.
func typeLabel(t string) string {
	if t == "" {
		return "none"
	}
	return t
}

// Observe records one committed unit of work. Its signature is that of
// idem.Config.Observe.
func (o *Observer) Observe(ob idem.Observation) {
	o.uow.Observe(ob.Duration.Seconds())
	o.messages.Observe(float64(ob.Messages))
	for _, t := range ob.SagaTypes {
		o.transition.WithLabelValues(typeLabel(t)).Observe(ob.Duration.Seconds())
	}
}

// RowEstimator is store.RowEstimator, which /metrics exports as
// idem_store_rows.
//
// Deprecated: the capability lives in the store contract; use
// store.RowEstimator.
type RowEstimator = store.RowEstimator

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

	typeMessages, typeDead, typeConflicts, typeLeaseLost, typeRedelivered, typeRawKeys *prometheus.Desc
	queueReady, queueUnacked, queueUp, rows                                            *prometheus.Desc

	stored    *storeGauges
	buildInfo prometheus.Metric
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

		typeMessages:    d("idem_saga_messages_total", "Committed messages by saga type and result: applied, ignored, duplicate (skipped by the inbox), not_found, retried (returned to the transport).", "saga_type", "result"),
		typeDead:        d("idem_saga_dead_letters_total", "Messages dead-lettered, by saga type and reason.", "saga_type", "reason"),
		typeConflicts:   d("idem_saga_conflicts_total", "Units of work holding messages of the saga type that lost an optimistic-concurrency race and were re-applied.", "saga_type"),
		typeLeaseLost:   d("idem_saga_lease_lost_total", "Messages whose transport lease ran out before their unit of work committed; the transport redelivers them.", "saga_type"),
		typeRedelivered: d("idem_saga_redelivered_total", "Committed messages that had been delivered before (delivery attempt above 1).", "saga_type"),
		typeRawKeys:     d("idem_saga_noncanonical_keys_total", "Applied messages whose raw correlation key differed from its canonical form.", "saga_type"),
		queueReady:      d("idem_queue_ready", "Messages the transport holds ready to hand out (the queue depth), when the transport can count them."),
		queueUnacked:    d("idem_queue_unacked", "Messages the transport handed out that are not settled yet, when the transport can count them."),
		queueUp:         d("idem_queue_up", "1 when the transport answered the last scrape's count, 0 otherwise; absent when it cannot count."),
		rows:            d("idem_store_rows", "Estimated rows by table, when the store can estimate them without a scan.", "table"),
		stored:          newStoreGauges(st, log),
		buildInfo:       newBuildInfo(debug.ReadBuildInfo()),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.messages, c.received, c.conflicts, c.retries, c.stale, c.emitted,
		c.relayed, c.fired, c.swept, c.backlog, c.oldest, c.timerLag, c.storeUp,
		c.typeMessages, c.typeDead, c.typeConflicts, c.typeLeaseLost, c.typeRedelivered, c.typeRawKeys,
		c.queueReady, c.queueUnacked, c.queueUp, c.rows} {
		ch <- d
	}
	c.stored.describe(ch)
	ch <- c.buildInfo.Desc()
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
	for typ, ts := range c.e.TypeStats() {
		l := typeLabel(typ)
		counter(c.typeMessages, ts.Applied, l, "applied")
		counter(c.typeMessages, ts.Ignored, l, "ignored")
		counter(c.typeMessages, ts.Duplicates, l, "duplicate")
		counter(c.typeMessages, ts.NotFound, l, "not_found")
		counter(c.typeMessages, ts.Retried, l, "retried")
		for reason, n := range ts.DeadLetters {
			counter(c.typeDead, n, l, reason)
		}
		counter(c.typeConflicts, ts.Conflicts, l)
		counter(c.typeLeaseLost, ts.LeaseLost, l)
		counter(c.typeRedelivered, ts.Redelivered, l)
		counter(c.typeRawKeys, ts.NonCanonicalKeys, l)
	}

	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
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
	if !c.stored.collect(ctx, ch, now) {
		up = 0
	}
	gauge(c.storeUp, up)
	ch <- c.buildInfo

	if pc, ok := c.e.Transport().(transport.PendingCounter); ok {
		ready, unacked, err := pc.Pending(ctx)
		if err != nil {
			c.log.Warn("metrics: count the transport's messages", "error", err)
			gauge(c.queueUp, 0)
		} else {
			gauge(c.queueReady, float64(ready))
			gauge(c.queueUnacked, float64(unacked))
			gauge(c.queueUp, 1)
		}
	}
	if re, ok := c.st.(store.RowEstimator); ok {
		rows, err := re.EstimateRows(ctx)
		if err != nil {
			c.log.Warn("metrics: estimate the store's rows", "error", err)
		}
		for table, n := range rows {
			gauge(c.rows, float64(n), table)
		}
	}
}

package admin

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// Observer records the duration of every committed unit of work in the
// histograms idem_unit_of_work_seconds and, by saga type,
// idem_transition_seconds, and the publish-to-commit latency of every
// applied message in idem_publish_to_commit_seconds. Create it with NewObserver before the engine, set
// its Observe method as idem.Config.Observe, and pass it in Config.Observer.
// It is a prometheus.Collector of its histograms. Its methods are safe for
// concurrent use and never block.
type Observer struct {
	uow        prometheus.Histogram
	messages   prometheus.Histogram
	transition *prometheus.HistogramVec
	publish    prometheus.Histogram
	admission  prometheus.Histogram
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
		publish: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idem_publish_to_commit_seconds",
			Help:    "Time from each applied message's SentAt (stamped by its sender) to the end of the commit that applied it: queueing, retries and the unit of work together. Clock skew between sender and engine shifts it; a SentAt in the future counts as 0.",
			Buckets: publishBuckets,
		}),
		admission: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "idem_admission_wait_seconds",
			Help:    "Time each message received through flow control (Config.Limits, Config.FairShare) waited, visible in the queue, before it was admitted; observed when its unit of work commits.",
			Buckets: publishBuckets,
		}),
	}
}

// publishBuckets span 1ms to about 9 minutes: a message may wait in the
// queue, or be retried, far longer than a unit of work takes.
var publishBuckets = prometheus.ExponentialBuckets(0.001, 2, 20)

// Describe implements prometheus.Collector.
func (o *Observer) Describe(ch chan<- *prometheus.Desc) {
	o.uow.Describe(ch)
	o.messages.Describe(ch)
	o.transition.Describe(ch)
	o.publish.Describe(ch)
	o.admission.Describe(ch)
}

// Collect implements prometheus.Collector.
func (o *Observer) Collect(ch chan<- prometheus.Metric) {
	o.uow.Collect(ch)
	o.messages.Collect(ch)
	o.transition.Collect(ch)
	o.publish.Collect(ch)
	o.admission.Collect(ch)
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
	ob.PublishToCommit(func(d time.Duration) bool {
		o.publish.Observe(d.Seconds())
		return true
	})
	ob.AdmissionWaits(func(d time.Duration) bool {
		o.admission.Observe(d.Seconds())
		return true
	})
}

// RowEstimator is readmodel.RowEstimator, which /metrics exports as
// idem_store_rows.
//
// Deprecated: the capability lives in the store contract; use
// readmodel.RowEstimator.
type RowEstimator = readmodel.RowEstimator

// collector reads the engine's counters and the store's backlog at scrape
// time.
type collector struct {
	e       *idem.Engine
	st      store.Store
	caps    *capabilities
	log     *slog.Logger
	timeout time.Duration
	now     func() time.Time

	messages, received, conflicts, retries, stale, emitted, relayed, fired, swept *prometheus.Desc
	backlog, oldest, timerLag, storeUp                                            *prometheus.Desc

	typeMessages, typeDead, typeConflicts, typeLeaseLost, typeRedelivered, typeRawKeys *prometheus.Desc
	queueReady, queueUnacked, queueUp, rows                                            *prometheus.Desc
	replicas                                                                           *prometheus.Desc // console_replicas.go
	limitInFlight, limitTokens, limitWaiting, limitConcurrency                         *prometheus.Desc // limits.go

	stored    *storeGauges
	buildInfo prometheus.Metric
}

func newCollector(e *idem.Engine, st store.Store, caps *capabilities, log *slog.Logger, timeout time.Duration) *collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &collector{
		e: e, st: st, caps: caps, log: log, timeout: timeout, now: time.Now,
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

		typeMessages:     d("idem_saga_messages_total", "Committed messages by saga type and result: applied, ignored, duplicate (skipped by the inbox), not_found, retried (returned to the transport).", "saga_type", "result"),
		typeDead:         d("idem_saga_dead_letters_total", "Messages dead-lettered, by saga type and reason.", "saga_type", "reason"),
		typeConflicts:    d("idem_saga_conflicts_total", "Units of work holding messages of the saga type that lost an optimistic-concurrency race and were re-applied.", "saga_type"),
		typeLeaseLost:    d("idem_saga_lease_lost_total", "Messages whose transport lease ran out before their unit of work committed; the transport redelivers them.", "saga_type"),
		typeRedelivered:  d("idem_saga_redelivered_total", "Committed messages that had been delivered before (delivery attempt above 1).", "saga_type"),
		typeRawKeys:      d("idem_saga_noncanonical_keys_total", "Applied messages whose raw correlation key differed from its canonical form.", "saga_type"),
		queueReady:       d("idem_queue_ready", "Messages the transport holds ready to hand out (the queue depth), when the transport can count them."),
		queueUnacked:     d("idem_queue_unacked", "Messages the transport handed out that are not settled yet, when the transport can count them."),
		queueUp:          d("idem_queue_up", "1 when the transport answered the last scrape's count, 0 otherwise; absent when it cannot count."),
		rows:             d("idem_store_rows", "Estimated rows by table, when the store can estimate them without a scan.", "table"),
		replicas:         d("idem_replicas", "Engine replicas by state (alive, stopped, gone) from the heartbeats in the store, when it keeps them: every replica reports the same numbers, so aggregate with max.", "state"),
		limitInFlight:    d("idem_limit_in_flight", "Messages in flight (admitted, not settled) per flow-control limit and key, across replicas: the 100 busiest keys of a limit, the rest (and a key named other) summed under key=\"other\". Every replica reports the same numbers: aggregate with max.", "limit", "key"),
		limitTokens:      d("idem_limit_tokens", "Tokens in the rate bucket of each flow-control limit and key now (refilled by the rate in force since its last admission); the same 100 keys as idem_limit_in_flight, the rest summed under key=\"other\".", "limit", "key"),
		limitWaiting:     d("idem_limit_waiting", "Queue messages waiting for admission per flow-control limit and key: those an admitting receive looked at and refused (or that wait behind a refused message of their saga key), still visible and not leased since; a backlog deeper than a receive's pages (one window behind a full covering limit) is undercounted, and beside a broker nothing is counted. The same 100 keys as idem_limit_in_flight, the rest summed under key=\"other\".", "limit", "key"),
		limitConcurrency: d("idem_limit_concurrency", "The concurrency cap in force of each flow-control limit, per key (the override, else the declaration); 0: no cap.", "limit"),
		stored:           newStoreGauges(st, caps, log),
		buildInfo:        newBuildInfo(debug.ReadBuildInfo()),
	}
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.messages, c.received, c.conflicts, c.retries, c.stale, c.emitted,
		c.relayed, c.fired, c.swept, c.backlog, c.oldest, c.timerLag, c.storeUp,
		c.typeMessages, c.typeDead, c.typeConflicts, c.typeLeaseLost, c.typeRedelivered, c.typeRawKeys,
		c.queueReady, c.queueUnacked, c.queueUp, c.rows, c.replicas, c.limitInFlight, c.limitTokens, c.limitWaiting, c.limitConcurrency} {
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
	if !c.collectLimits(ctx, ch) {
		up = 0
	}
	gauge(c.storeUp, up)
	ch <- c.buildInfo

	if pc := c.caps.transportPending; pc != nil {
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
	if re := c.caps.rowEstimator; re != nil {
		rows, err := re.EstimateRows(ctx)
		if err != nil {
			c.log.Warn("metrics: estimate the store's rows", "error", err)
		}
		for table, n := range rows {
			gauge(c.rows, float64(n), table)
		}
	}
	c.collectReplicas(ctx, now, gauge)
}

// StoreGaugeInterval is how often /metrics reads the store's gauges
// (idem_dead_letters_stored, idem_dead_letters_unresolved,
// idem_timers_pending, idem_sagas, idem_tokens_unclaimed_stale): the
// first scrape after it reads them, and the scrapes in between repeat the
// last values. Each read costs one query per gauge, so their cost does not
// grow with the scrape rate or the number of Prometheus servers.
const StoreGaugeInterval = time.Minute

// StoreGaugeBound is how many rows a store gauge counts exactly: above it,
// idem_dead_letters_stored and idem_timers_pending are the store's
// estimate (readmodel.RowEstimator), and idem_tokens_unclaimed_stale stays at
// the bound.
const StoreGaugeBound = 10_000

// UnclaimedTokenAge is how old an unclaimed dedup token must be to count
// in idem_tokens_unclaimed_stale: a tokened message is claimed within
// seconds, or within minutes when it is retried, so an older token's
// message was lost, is dead-lettered, or waits for a consumer that is
// down.
const UnclaimedTokenAge = time.Hour

// storeGauges reads what the store holds, every process's alike, at most
// once per StoreGaugeInterval.
type storeGauges struct {
	st   store.Store
	caps *capabilities
	log  *slog.Logger

	deadLetters, unresolved, timers, sagas, sagasEstimated, staleTokens *prometheus.Desc

	mu     sync.Mutex
	readAt time.Time
	last   []prometheus.Metric
}

func newStoreGauges(st store.Store, caps *capabilities, log *slog.Logger) *storeGauges {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, labels, nil)
	}
	return &storeGauges{
		st: st, caps: caps, log: log,
		deadLetters:    d("idem_dead_letters_stored", "Dead letters the store holds, resolved or not: exact up to 10000, the store's estimate above."),
		unresolved:     d("idem_dead_letters_unresolved", "Stored dead letters no replay resolved (never replayed, or the latest replay failed): the ones waiting for an operator."),
		timers:         d("idem_timers_pending", "Timers the store holds, due or not: exact up to 10000, the store's estimate above."),
		sagas:          d("idem_sagas", "Saga instances by saga type, state and status (active, finished); an estimate on PostgreSQL above 200000 instances (see idem_sagas_estimated).", "saga_type", "state", "status"),
		sagasEstimated: d("idem_sagas_estimated", "1 when idem_sagas holds estimates (PostgreSQL statistics or a sample), 0 when it holds exact counts."),
		staleTokens:    d("idem_tokens_unclaimed_stale", "Dedup tokens minted over an hour ago and never claimed, counted up to 10000."),
	}
}

func (g *storeGauges) describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{g.deadLetters, g.unresolved, g.timers, g.sagas, g.sagasEstimated, g.staleTokens} {
		ch <- d
	}
}

// collect sends the store gauges, reading them again when the last read is
// StoreGaugeInterval old. It reports false when a read failed: the gauges
// that failed are left out, and the next scrape reads again.
func (g *storeGauges) collect(ctx context.Context, ch chan<- prometheus.Metric, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	ok := true
	if g.readAt.IsZero() || now.Sub(g.readAt) >= StoreGaugeInterval || now.Before(g.readAt) {
		r := storeRead{g: g, now: now}
		r.read(ctx)
		g.last, ok = r.out, !r.failed
		if ok {
			g.readAt = now
		} else {
			g.readAt = time.Time{}
		}
	}
	for _, m := range g.last {
		ch <- m
	}
	return ok
}

// storeRead is one read of the store gauges.
type storeRead struct {
	g      *storeGauges
	now    time.Time
	out    []prometheus.Metric
	failed bool
	est    map[string]int64
}

func (r *storeRead) read(ctx context.Context) {
	st, caps := r.g.st, r.g.caps
	r.count(ctx, r.g.deadLetters, readmodel.TableDeadLetters)
	r.count(ctx, r.g.timers, readmodel.TableTimers)
	if dq := caps.deadLetters; dq != nil {
		c, err := dq.CountDeadLetters(ctx, &readmodel.DeadLetterQuery{State: store.DeadLettersUnresolved})
		if r.check(err, "count unresolved dead letters") {
			n := 0
			for _, k := range c.ByReason {
				n += k
			}
			r.gauge(r.g.unresolved, float64(n))
		}
	}
	counts, exact, err := inspect.Counts(ctx, st)
	if r.check(err, "count sagas by state") {
		for _, c := range counts {
			r.gauge(r.g.sagas, float64(c.Count), c.SagaType, c.State, c.Status)
		}
		estimated := 1.0
		if exact {
			estimated = 0
		}
		r.gauge(r.g.sagasEstimated, estimated)
	}
	if ts := caps.tokens; ts != nil {
		n, err := ts.CountStaleTokens(ctx, &store.StaleTokens{MintedBefore: r.now.Add(-UnclaimedTokenAge), Limit: StoreGaugeBound})
		if r.check(err, "count stale tokens") {
			r.gauge(r.g.staleTokens, float64(n))
		}
	}
}

// check logs err, if any, and reports whether there was none.
func (r *storeRead) check(err error, what string) bool {
	if err != nil {
		r.g.log.Warn("metrics: "+what, "error", err)
		r.failed = true
	}
	return err == nil
}

// gauge adds a gauge; a label value Prometheus refuses (invalid UTF-8 in a
// stored saga type or state) leaves that one out, logged.
func (r *storeRead) gauge(d *prometheus.Desc, v float64, labels ...string) {
	m, err := prometheus.NewConstMetric(d, prometheus.GaugeValue, v, labels...)
	if err != nil {
		r.g.log.Warn("metrics: a store gauge has a label Prometheus refuses", "error", err)
		return
	}
	r.out = append(r.out, m)
}

// count adds the rows of table: counted exactly up to StoreGaugeBound
// (readmodel.RowCounter), estimated above (readmodel.RowEstimator). A store that
// can do neither has no such gauge.
func (r *storeRead) count(ctx context.Context, d *prometheus.Desc, table string) {
	rc, re := r.g.caps.rowCounter, r.g.caps.rowEstimator
	counts, estimates := rc != nil, re != nil
	n := int64(0)
	switch {
	case counts:
		var err error
		if n, err = rc.CountRows(ctx, table, StoreGaugeBound); !r.check(err, "count "+table) {
			return
		}
		if n < StoreGaugeBound || !estimates {
			r.gauge(d, float64(n))
			return
		}
	case !estimates:
		return
	}
	if r.est == nil {
		est, err := re.EstimateRows(ctx)
		if !r.check(err, "estimate rows") {
			return
		}
		r.est = est
	}
	r.gauge(d, float64(max(n, r.est[table]))) // the estimate may lag the bound
}

// newBuildInfo is idem_build_info: the version and VCS revision of Idem in
// the running binary, and the Go version it was built with.
func newBuildInfo(bi *debug.BuildInfo, ok bool) prometheus.Metric {
	version, revision := buildVersion(bi, ok)
	return prometheus.MustNewConstMetric(
		prometheus.NewDesc("idem_build_info", "Always 1: the labels say which Idem runs (its module version, or (devel); the VCS revision of the binary, or unknown) and the Go version it was built with.",
			nil, prometheus.Labels{"version": version, "revision": revision, "goversion": runtime.Version()}),
		prometheus.GaugeValue, 1)
}

// modulePath is Idem's module path, to find its version in a program that
// imports it.
const modulePath = "github.com/idemhq/idem"

// buildVersion returns Idem's module version in bi ("(devel)" when the
// binary was built from a checkout, or bi is missing) and the binary's VCS
// revision ("unknown" without one).
func buildVersion(bi *debug.BuildInfo, ok bool) (version, revision string) {
	version, revision = "(devel)", "unknown"
	if !ok || bi == nil {
		return version, revision
	}
	m := &bi.Main
	if m.Path != modulePath {
		for _, d := range bi.Deps {
			if d.Path == modulePath {
				m = d
				if d.Replace != nil && d.Replace.Version != "" {
					m = d.Replace
				}
				break
			}
		}
	}
	if m.Path == modulePath && m.Version != "" {
		version = m.Version
	}
	for _, s := range bi.Settings {
		if s.Key == "vcs.revision" && s.Value != "" {
			revision = s.Value
		}
	}
	return version, revision
}

package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// countingTransport is a memory transport that counts its messages, like a
// broker with transport.PendingCounter.
type countingTransport struct {
	*memtransport.Transport
	fail bool
}

func (c *countingTransport) Pending(context.Context) (int, int, error) {
	if c.fail {
		return 0, 0, errors.New("broker unreachable")
	}
	return c.Transport.Pending(context.Background())
}

var _ transport.PendingCounter = (*countingTransport)(nil)

// The per-type metrics count what the engine did to each saga type:
// duplicates, dead letters by reason, keys that were not canonical, and
// the transition latency; the queue depth comes from the transport and the
// row counts from the store (memstore's are exact).
func TestMetricsByType(t *testing.T) {
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := memstore.New(nil)
	defer st.Close()
	tr := &countingTransport{Transport: memtransport.New(nil)}
	defer tr.Close()
	obs := admin.NewObserver()
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: logger, Observe: obs.Observe})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(orders.OrderMachine()); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Stop(ctx)

	placed := func(id, order string) idem.Envelope {
		env, err := e.NewEnvelope(id, orders.OrderPlaced{OrderID: order, Items: 1})
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	envs := []idem.Envelope{
		placed("p-1", "caf\u00e9"),  // canonical (NFC)
		placed("p-2", "cafe\u0301"), // NFD: the same saga, a key that was not canonical
		placed("p-1", "caf\u00e9"),  // a duplicate
		{ID: "u-1", Type: "nobody.Consumes", Body: []byte(`{}`)},
	}
	for _, env := range envs {
		if err := e.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	poll(t, "four settled messages", func() bool {
		s := e.Stats()
		return s.Applied+s.Ignored+s.Duplicates+s.DeadLettered == 4
	})

	reg := prometheus.NewRegistry()
	h, err := admin.New(e, st, &admin.Config{Observer: obs, Logger: logger, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil))
	body := rec.Body.String()
	for _, want := range []string{
		`idem_saga_messages_total{result="applied",saga_type="order"} 1`,
		`idem_saga_messages_total{result="ignored",saga_type="order"} 1`,
		`idem_saga_messages_total{result="duplicate",saga_type="order"} 1`,
		`idem_saga_dead_letters_total{reason="` + idem.ReasonUnknownType + `",saga_type="none"} 1`,
		`idem_saga_noncanonical_keys_total{saga_type="order"} 0`,
		`idem_saga_conflicts_total{saga_type="order"} 0`,
		`idem_transition_seconds_count{saga_type="order"}`,
		`idem_queue_ready 0`, `idem_queue_up 1`,
		`idem_store_rows{table="inbox"} 2`, `idem_store_rows{table="journal"} 1`, `idem_store_rows{table="dead_letters"} 1`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics: want a line with %q in:\n%s", want, body)
		}
	}

	// The NFD key above met a saga in a state that ignores it; a saga
	// started by an NFD key counts one key that was not canonical.
	if err := e.Publish(ctx, placed("p-3", "na\u0303o")); err != nil {
		t.Fatal(err)
	}
	poll(t, "a non-canonical key", func() bool { return e.TypeStats()["order"].NonCanonicalKeys == 1 })
	tr.fail = true
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil))
	body = rec.Body.String()
	for _, want := range []string{`idem_saga_noncanonical_keys_total{saga_type="order"} 1`, `idem_queue_up 0`} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics: want a line with %q in:\n%s", want, body)
		}
	}
}

// poll waits until cond holds, failing t after ten seconds.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		<-tick.C
	}
}

// scrape returns the text of h's /metrics.
func scrape(t *testing.T, h http.Handler) string {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("GET /metrics: status %d, want 200: %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

// wantLines fails t for each line of want missing from body.
func wantLines(t *testing.T, body string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("metrics: want a line with %q in:\n%s", w, body)
		}
	}
}

// idem_publish_to_commit_seconds has one observation per applied message,
// from its SentAt to the commit: a duplicate, a message without SentAt
// and an ignored one add none, and a SentAt in the future counts as 0.
func TestMetricsPublishToCommit(t *testing.T) {
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st := memstore.New(nil)
	defer st.Close()
	tr := memtransport.New(nil)
	defer tr.Close()
	obs := admin.NewObserver()
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: logger, Observe: obs.Observe})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Register(orders.OrderMachine()); err != nil {
		t.Fatal(err)
	}
	placed := func(id, order string, sentAt time.Time) idem.Envelope {
		env, err := e.NewEnvelope(id, orders.OrderPlaced{OrderID: order, Items: 1})
		if err != nil {
			t.Fatal(err)
		}
		env.SentAt = sentAt
		return env
	}
	now := time.Now()
	envs := []idem.Envelope{
		placed("p-1", "o-1", now.Add(-3*time.Second)), // applied, 3s old
		placed("p-1", "o-1", now.Add(-3*time.Second)), // a duplicate
		placed("p-2", "o-2", time.Time{}),             // applied, no SentAt
		placed("p-3", "o-3", now.Add(time.Hour)),      // applied, from a clock ahead
		placed("p-4", "o-1", now.Add(-time.Minute)),   // ignored: o-1 is placed already
	}
	if err := tr.Publish(ctx, envs); err != nil { // as sent, SentAt included
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Stop(ctx)
	poll(t, "five settled messages", func() bool {
		s := e.Stats()
		return s.Applied+s.Ignored+s.Duplicates == 5
	})
	h, err := admin.New(e, st, &admin.Config{Observer: obs, Logger: logger, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, scrape(t, h),
		"idem_publish_to_commit_seconds_count 2\n",
		`idem_publish_to_commit_seconds_bucket{le="0.001"} 1`+"\n", // the one from the future
		`idem_publish_to_commit_seconds_bucket{le="2.048"} 1`+"\n",
		`idem_publish_to_commit_seconds_bucket{le="4.096"} 2`+"\n",
		"idem_admission_wait_seconds_count 0\n", // no flow control
	)
}

// idem_admission_wait_seconds has one observation per message received
// through flow control (here Config.FairShare on SQLite's own queue).
func TestMetricsAdmissionWait(t *testing.T) {
	ctx := context.Background()
	obs := admin.NewObserver()
	st, e, logger := fairSQLiteEngine(t, obs)
	if err := e.Register(orders.OrderMachine()); err != nil {
		t.Fatal(err)
	}
	var envs []idem.Envelope
	for i := range 3 {
		env, err := e.NewEnvelope(fmt.Sprint("p-", i), orders.OrderPlaced{OrderID: fmt.Sprint("o-", i), Items: 1})
		if err != nil {
			t.Fatal(err)
		}
		envs = append(envs, env)
	}
	if err := e.Publish(ctx, envs...); err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer e.Stop(ctx)
	poll(t, "three applied messages", func() bool { return e.Stats().Applied == 3 })
	h, err := admin.New(e, st, &admin.Config{Observer: obs, Logger: logger, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	wantLines(t, scrape(t, h), "idem_admission_wait_seconds_count 3\n")
}

// commitChanges commits c in a unit of work of st.
func commitChanges(t *testing.T, st store.Store, c *store.Changes) {
	t.Helper()
	uow, err := st.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer uow.Rollback(t.Context())
	if _, err := uow.Load(t.Context(), &store.LoadParams{}); err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(t.Context(), c); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func deadLetter(id string, at time.Time) store.DeadLetter {
	return store.DeadLetter{
		ID: id, Envelope: transport.Envelope{ID: id, Type: "orders.OrderPlaced", Body: []byte(`{}`), SentAt: at},
		Reason: idem.ReasonPermanent, Error: "no <script>", SagaType: "order", Key: "o-1",
		Attempts: 1, FirstFailedAt: at, LastFailedAt: at,
	}
}

// The store gauges say what every store holds: dead letters stored and
// unresolved, pending timers, sagas by type, state and status, and old
// unclaimed tokens. They are read at most once per StoreGaugeInterval: a
// scrape soon after another repeats its values.
func TestMetricsStoreGauges(t *testing.T) {
	for name, st := range metricsStores(t) {
		t.Run(name, func(t *testing.T) {
			testStoreGauges(t, st)
		})
	}
}

func testStoreGauges(t *testing.T, st store.Store) {
	ctx := t.Context()
	now := time.Now().UTC().Truncate(time.Millisecond)
	inst := func(key, state string, finished bool) *store.Instance {
		in := &store.Instance{SagaType: "order", Key: key, State: state, Data: []byte(`{}`), Version: 1, CreatedAt: now, UpdatedAt: now}
		if finished {
			in.FinishedAt = now
		}
		return in
	}
	timer := func(key string) store.Timer {
		return store.Timer{SagaType: "order", Key: key, Name: "t", DueAt: now.Add(time.Hour),
			Envelope: transport.Envelope{ID: "timer-" + key, Type: "orders.PaymentTimedOut", Body: []byte(`{}`)}}
	}
	commitChanges(t, st, &store.Changes{
		Inserts:     []*store.Instance{inst("o-1", "AwaitingPayment", false), inst("o-2", "AwaitingPayment", false), inst("o-3", "Shipped", true)},
		Timers:      []store.Timer{timer("o-1"), timer("o-2")},
		DeadLetters: []store.DeadLetter{deadLetter("d-1", now), deadLetter("d-2", now), deadLetter("d-3", now)},
	})
	rp := st.(store.DeadLetterReplayer)
	if err := rp.BeginReplay(ctx, "d-3", now); err != nil {
		t.Fatal(err)
	}
	if err := rp.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{"d-3"}, Outcome: store.ReplaySucceeded, At: now}); err != nil {
		t.Fatal(err)
	}
	tokens := []store.Token{{ID: "orders.OrderPlaced\x1fold", MintedAt: now.Add(-2 * time.Hour)}, {ID: "orders.OrderPlaced\x1fnew", MintedAt: now}}
	if err := st.(store.TokenStore).MintTokens(ctx, tokens); err != nil {
		t.Fatal(err)
	}

	tr := memtransport.New(nil)
	defer tr.Close()
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	newHandler := func() http.Handler {
		h, err := admin.New(e, st, &admin.Config{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	h := newHandler()
	wantLines(t, scrape(t, h),
		"idem_dead_letters_stored 3\n",
		"idem_dead_letters_unresolved 2\n", // d-3's replay succeeded
		"idem_timers_pending 2\n",
		`idem_sagas{saga_type="order",state="AwaitingPayment",status="active"} 2`+"\n",
		`idem_sagas{saga_type="order",state="Shipped",status="finished"} 1`+"\n",
		"idem_sagas_estimated 0\n",
		"idem_tokens_unclaimed_stale 1\n",
		"idem_store_up 1\n",
	)

	commitChanges(t, st, &store.Changes{DeadLetters: []store.DeadLetter{deadLetter("d-4", now)}})
	wantLines(t, scrape(t, h), "idem_dead_letters_stored 3\n", "idem_dead_letters_unresolved 2\n") // read a moment ago
	wantLines(t, scrape(t, newHandler()), "idem_dead_letters_stored 4\n", "idem_dead_letters_unresolved 3\n")
}

// idem_build_info names Idem's version, the binary's revision and Go's
// version.
func TestMetricsBuildInfo(t *testing.T) {
	st := memstore.New(nil)
	defer st.Close()
	tr := memtransport.New(nil)
	defer tr.Close()
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(e, st, &admin.Config{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	body := scrape(t, h)
	want := regexp.MustCompile(`(?m)^idem_build_info\{goversion="` + regexp.QuoteMeta(runtime.Version()) + `",revision="[^"]+",version="[^"]+"\} 1$`)
	if !want.MatchString(body) {
		t.Errorf("metrics: want a line matching %s in:\n%s", want, body)
	}
}

// metricsStores returns fresh stores of every kind: memory, SQLite, and
// PostgreSQL in a schema of its own (skipped without IDEM_TEST_PG_URL,
// failed under IDEM_REQUIRE_SERVERS).
func metricsStores(t *testing.T) map[string]store.Store {
	t.Helper()
	lite, err := sqlitestore.Open(t.Context(), filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	mem := memstore.New(nil)
	t.Cleanup(func() { mem.Close() })
	out := map[string]store.Store{"memory": mem, "sqlite": lite}
	url := os.Getenv("IDEM_TEST_PG_URL")
	if url == "" {
		if os.Getenv("IDEM_REQUIRE_SERVERS") != "" {
			t.Fatal("IDEM_TEST_PG_URL is not set but IDEM_REQUIRE_SERVERS is: start PostgreSQL (scripts/pg.sh)")
		}
		t.Log("IDEM_TEST_PG_URL is not set: checking memory and SQLite only")
		return out
	}
	schema := fmt.Sprintf("admin_metrics_%d_%d", os.Getpid(), time.Now().UnixNano())
	pg, err := pgstore.Open(t.Context(), url, &pgstore.Config{Schema: schema, Migrate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pg.Pool().Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		pg.Close()
	})
	out["postgres"] = pg
	return out
}

// metricsScaleSchema is BenchmarkMetricsStoreGauges's schema: the console
// benchmark's data (1,000,000 instances, 100,000 dead letters, 50,000
// timers), seeded once and kept; drop it to reseed.
const metricsScaleSchema = "bench_metrics_v1"

// BenchmarkMetricsStoreGauges measures one read of the store gauges on
// PostgreSQL at the console benchmark's scale: each op is the first scrape
// of a new handler, so it reads the store (the later scrapes of a minute
// repeat its values).
//
//	IDEM_TEST_PG_URL=postgres://... go test -run '^$' -bench BenchmarkMetricsStoreGauges -benchtime 20x ./admin/
func BenchmarkMetricsStoreGauges(b *testing.B) {
	url := os.Getenv("IDEM_TEST_PG_URL")
	if url == "" {
		b.Skip("IDEM_TEST_PG_URL is not set: the metrics scale benchmark needs PostgreSQL")
	}
	ctx := context.Background()
	st, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: metricsScaleSchema, Migrate: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	var n int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM idem_dead_letters`).Scan(&n); err != nil {
		b.Fatal(err)
	}
	if n == 0 {
		start := time.Now()
		for _, q := range scaleSeedSQL {
			if _, err := st.Pool().Exec(ctx, q); err != nil {
				b.Fatalf("seed %s: %v", metricsScaleSchema, err)
			}
		}
		b.Logf("seeded %s in %s", metricsScaleSchema, time.Since(start).Round(time.Second))
	}
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		b.StopTimer()
		h, err := admin.New(e, st, &admin.Config{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil))
		if !strings.Contains(rec.Body.String(), "idem_store_up 1") {
			b.Fatalf("metrics: the store did not answer:\n%s", rec.Body)
		}
	}
}

// A stored saga type or state that Prometheus refuses as a label value
// (invalid UTF-8) leaves that gauge out; markup and NUL are exported as
// text, and the other gauges still are.
func TestMetricsStoreGaugesHostileLabels(t *testing.T) {
	st := memstore.New(nil)
	defer st.Close()
	now := time.Now()
	inst := func(typ, state string) *store.Instance {
		return &store.Instance{SagaType: typ, Key: "k", State: state, Data: []byte(`{}`), Version: 1, CreatedAt: now, UpdatedAt: now}
	}
	commitChanges(t, st, &store.Changes{Inserts: []*store.Instance{
		inst("bad\xff", "S"), inst("order", "<script>alert(1)</script>"), inst("nul\x00type", "S"),
	}})
	tr := memtransport.New(nil)
	defer tr.Close()
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(e, st, &admin.Config{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	body := scrape(t, h)
	wantLines(t, body,
		`idem_sagas{saga_type="order",state="<script>alert(1)</script>",status="active"} 1`+"\n",
		"idem_sagas_estimated 0\n", "idem_store_up 1\n")
	if strings.Contains(body, "bad") {
		t.Errorf("metrics: a saga type with invalid UTF-8 was exported:\n%s", body)
	}
}

// fairSQLiteEngine opens a SQLite store and an engine on its queue with
// Config.FairShare, observed by obs when it is not nil; not started.
func fairSQLiteEngine(t *testing.T, obs *admin.Observer) (*sqlitestore.Store, *idem.Engine, *slog.Logger) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlitestore.Open(context.Background(), filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	cfg := &idem.Config{Logger: logger, FairShare: true}
	if obs != nil {
		cfg.Observe = obs.Observe
	}
	e, err := idem.NewEngine(st, st, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return st, e, logger
}

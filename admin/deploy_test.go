package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport/memtransport"
)

const (
	dashboardFile = "../deploy/grafana/idem-dashboard.json"
	alertsFile    = "../deploy/prometheus/idem-alerts.yml"
	alertTests    = "../deploy/prometheus/idem-alerts.test.yml"
)

// exported returns the names of the metrics that /metrics of an admin
// server over st has samples of, after an engine on st applied, skipped as
// duplicate and dead-lettered messages: what an operator's Prometheus
// scrapes, not what the collectors merely describe.
func exported(t *testing.T, st store.Store) map[string]bool {
	t.Helper()
	ctx := t.Context()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	tr := memtransport.New(nil)
	t.Cleanup(func() { tr.Close() })
	obs := NewObserver()
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
	t.Cleanup(func() { _ = e.Stop(context.Background()) })
	env, err := e.NewEnvelope("p-1", orders.OrderPlaced{OrderID: "o-1", Items: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []idem.Envelope{env, env, {ID: "u-1", Type: "nobody.Consumes", Body: []byte(`{}`)}} {
		if err := e.Publish(ctx, env); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for s := e.Stats(); s.Applied+s.Duplicates+s.DeadLettered < 3; s = e.Stats() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for three settled messages: %+v", s)
		}
		<-tick.C
	}
	useLimit(t, st)
	h, err := New(e, st, &Config{Observer: obs, Logger: logger, Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1/metrics", nil))
	names := map[string]bool{}
	for line := range strings.Lines(rec.Body.String()) {
		if name, _, ok := strings.Cut(line, " "); ok && !strings.HasPrefix(line, "#") {
			name, _, _ = strings.Cut(name, "{")
			names[name] = true
		}
	}
	if !names["idem_store_up"] || !names["idem_transition_seconds_bucket"] {
		t.Fatalf("/metrics has samples of %v: want idem_store_up and idem_transition_seconds among them", names)
	}
	return names
}

// useLimit declares a limit on st and holds one of its slots, as an
// engine with idem.Config.Limits does, so that the limit metrics have
// samples.
func useLimit(t *testing.T, st store.Store) {
	t.Helper()
	lim, ok := st.(store.Limiter)
	if !ok {
		t.Fatalf("store %T keeps no limits", st)
	}
	l := store.Limit{Name: "parser-api", Concurrency: 2}
	if err := lim.DeclareLimits(t.Context(), []store.Limit{l}); err != nil {
		t.Fatal(err)
	}
	req := store.AdmitRequest{Holder: "h-1", Keys: []store.LimitKey{{Name: l.Name, Key: "tenant-a"}}}
	if _, err := lim.Admit(t.Context(), &store.AdmitParams{Limits: map[string]store.Limit{l.Name: l}, Requests: []store.AdmitRequest{req}, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
}

// deployStores returns the bundled SQL stores, fresh: SQLite, and
// PostgreSQL in a schema of its own (skipped without IDEM_TEST_PG_URL,
// failed under IDEM_REQUIRE_SERVERS).
func deployStores(t *testing.T) map[string]store.Store {
	t.Helper()
	ctx := t.Context()
	lite, err := sqlitestore.Open(ctx, filepath.Join(t.TempDir(), "idem.db"), &sqlitestore.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lite.Close() })
	out := map[string]store.Store{"sqlite": lite}
	url := os.Getenv("IDEM_TEST_PG_URL")
	if url == "" {
		if os.Getenv("IDEM_REQUIRE_SERVERS") != "" {
			t.Fatal("IDEM_TEST_PG_URL is not set but IDEM_REQUIRE_SERVERS is: start PostgreSQL (scripts/pg.sh)")
		}
		t.Log("IDEM_TEST_PG_URL is not set: checking SQLite only")
		return out
	}
	schema := fmt.Sprintf("admin_deploy_%d_%d", os.Getpid(), time.Now().UnixNano())
	pg, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: schema, Migrate: true, Logger: slog.New(slog.DiscardHandler)})
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

var metricName = regexp.MustCompile(`\bidem_[a-z_]+\b`)

// usedMetrics returns the idem_ metric names in text, without the
// _bucket, _sum and _count suffixes of histograms.
func usedMetrics(text string) []string {
	var out []string
	for _, m := range metricName.FindAllString(text, -1) {
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(m, suf); ok && base != "idem_unit_of_work" {
				m = base
			}
		}
		if m == "idem_unit_of_work_messages_count" || m == "idem_unit_of_work_messages_sum" {
			m = "idem_unit_of_work_messages"
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	return out
}

type dashboard struct {
	Panels []struct {
		Title   string `json:"title"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	return d
}

// The dashboard and the alerts use only metrics that /metrics exports, with
// samples, on each bundled SQL store: a renamed metric, or one that a store
// never exports (idem_store_rows, once), breaks this test instead of an
// operator's panel.
func TestDeployUsesExportedMetrics(t *testing.T) {
	d := readDashboard(t)
	var exprs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	if len(exprs) < 10 {
		t.Fatalf("the dashboard has %d queries; want a full dashboard", len(exprs))
	}
	alerts, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range deployStores(t) {
		t.Run(name, func(t *testing.T) {
			names := exported(t, st)
			for file, text := range map[string]string{dashboardFile: strings.Join(exprs, "\n"), alertsFile: string(alerts)} {
				used := usedMetrics(text)
				if len(used) == 0 {
					t.Errorf("%s uses no idem_ metric", file)
				}
				for _, m := range used {
					if !names[m] && !names[m+"_bucket"] {
						t.Errorf("%s uses %s, which /metrics on %s has no sample of", file, m, name)
					}
				}
			}
		})
	}
}

// promtool returns the path of promtool, skipping the test without it
// (failing it under IDEM_REQUIRE_SERVERS: scripts/test installs it).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("IDEM_REQUIRE_SERVERS") != "" {
			t.Fatal("promtool is not installed but IDEM_REQUIRE_SERVERS is set: scripts/test installs it (Debian package prometheus)")
		}
		t.Skip("promtool not installed: apt-get install prometheus")
	}
	return p
}

// The alert rules pass their unit tests, and every dashboard query parses.
func TestDeployPromtool(t *testing.T) {
	bin := promtool(t)
	if out, err := exec.Command(bin, "test", "rules", alertTests).CombinedOutput(); err != nil {
		t.Errorf("promtool test rules: %v\n%s", err, out)
	}
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	r := strings.NewReplacer("$__rate_interval", "5m", "$job", ".*", "$saga_type", ".*")
	n := 0
	for _, p := range readDashboard(t).Panels {
		for _, tg := range p.Targets {
			n++
			rules.WriteString("      - record: dashboard_query_" + strconv.Itoa(n) + "\n        expr: " + strconv.Quote(r.Replace(tg.Expr)) + "\n")
		}
	}
	file := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.CommandContext(context.Background(), bin, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("a dashboard query does not parse: %v\n%s", err, out)
	}
}

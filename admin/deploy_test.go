package admin

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

const (
	dashboardFile = "../deploy/grafana/idem-dashboard.json"
	alertsFile    = "../deploy/prometheus/idem-alerts.yml"
	alertTests    = "../deploy/prometheus/idem-alerts.test.yml"
)

// exported returns the names of every metric the collectors of admin.New
// describe, whether or not they have samples yet.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, tr := memstore.New(nil), memtransport.New(nil)
	t.Cleanup(func() { st.Close(); tr.Close() })
	e, err := idem.NewEngine(st, tr, &idem.Config{Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	ch := make(chan *prometheus.Desc)
	done := make(chan struct{})
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	go func() {
		defer close(done)
		for d := range ch {
			if m := re.FindStringSubmatch(d.String()); m != nil {
				names[m[1]] = true
			}
		}
	}()
	for _, c := range []prometheus.Collector{newCollector(e, st, logger, time.Second), NewObserver()} {
		c.Describe(ch)
	}
	close(ch)
	<-done
	if !names["idem_store_up"] || !names["idem_transition_seconds"] {
		t.Fatalf("the collectors describe %v: want idem_store_up and idem_transition_seconds among them", names)
	}
	return names
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

// The dashboard and the alerts use only metrics that /metrics exports, so
// a renamed metric breaks this test instead of an operator's panel.
func TestDeployUsesExportedMetrics(t *testing.T) {
	names := exported(t)
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
	for file, text := range map[string]string{dashboardFile: strings.Join(exprs, "\n"), alertsFile: string(alerts)} {
		used := usedMetrics(text)
		if len(used) == 0 {
			t.Errorf("%s uses no idem_ metric", file)
		}
		for _, m := range used {
			if !names[m] {
				t.Errorf("%s uses %s, which /metrics does not export", file, m)
			}
		}
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

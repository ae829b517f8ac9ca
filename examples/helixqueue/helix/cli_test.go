package helix_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/text/unicode/norm"

	"github.com/idemhq/idem/examples/helixqueue/helix"
)

// run-demo: nine submissions are six batches, all completed once, the
// killed worker's batch released by the reaper and completed by another
// worker, and the reconciliation metrics at zero.
func TestRunDemo(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		args := []string{"run-demo", "--store", o.Store, "--redis", o.Redis, "--namespace", o.Namespace, "--lease", "1s", "--work", "50ms"}
		if o.Schema != "" {
			args = append(args, "--schema", o.Schema)
		}
		var out, errOut bytes.Buffer
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if code := helix.Main(ctx, args, &out, &errOut); code != 0 {
			t.Fatalf("run-demo exit %d: %s\n%s", code, out.String(), errOut.String())
		}
		text := out.String()
		var s helix.Summary
		if err := json.Unmarshal([]byte(text[strings.Index(text, "{"):]), &s); err != nil {
			t.Fatalf("summary: %v\n%s", err, text)
		}
		if s.Submissions != 9 || s.Batches != 6 || s.Completed != 6 {
			t.Errorf("submissions %d batches %d completed %d, want 9, 6, 6", s.Submissions, s.Batches, s.Completed)
		}
		var reaped bool
		for _, r := range s.Reclaimed {
			reaped = reaped || (r.Worker == "gpu-1" && r.Reason == helix.ReasonLeaseExpired)
		}
		last := s.Reclaimed[len(s.Reclaimed)-1]
		if !reaped || last.To != helix.Completed || last.Worker == "gpu-1" {
			t.Errorf("killed batch audit %+v: want gpu-1's lease reaped and another worker's COMPLETED last", s.Reclaimed)
		}
		for _, name := range []string{"helix_duplicate_active_assignments", "helix_audit_missing_total"} {
			if v, ok := s.Metrics[name]; !ok || v != 0 {
				t.Errorf("metric %s = %v (present %v), want 0", name, v, ok)
			}
		}
		if s.Metrics["helix_lease_reaped_total"] < 1 {
			t.Errorf("helix_lease_reaped_total %v, want at least 1", s.Metrics["helix_lease_reaped_total"])
		}
		// The NFD spelling was submitted second: its journal entry keeps it.
		if len(s.TwinJournal) < 2 || s.TwinJournal[1]["raw_key"] == s.TwinJournal[0]["raw_key"] {
			t.Errorf("twin journal %v: want the second submission's raw key to differ", s.TwinJournal)
		}
	})
}

// The unique partial index refuses a second active assignment even from
// outside the saga.
func TestOneActiveAssignmentIndex(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		ctx := testCtx(t)
		a := start(t, o)
		if _, err := a.Submit(ctx, nfc); err != nil {
			t.Fatal(err)
		}
		if r, err := a.TryAssign(ctx, nfc, "gpu-1"); err != nil || !r.Won {
			t.Fatalf("assign: %+v, %v", r, err)
		}
		q := `INSERT INTO helix_assignments (sample_key, attempt, worker, state) VALUES ('` + nfc + `', 9, 'rogue', 'ASSIGNED')`
		if _, err := a.DB.ExecContext(ctx, q); err == nil {
			t.Fatal("a second active assignment was accepted")
		}
	})
}

// /metrics serves the incident's metric names with their values.
func TestMetricsEndpoint(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		ctx := testCtx(t)
		a := start(t, o)
		if _, err := a.Submit(ctx, norm.NFD.String(nfc)); err != nil {
			t.Fatal(err)
		}
		m := helix.NewMetrics(a)
		srv := httptest.NewServer(promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
		defer srv.Close()
		resp, err := http.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range []string{"helix_assign_conflict_total 0", "helix_duplicate_active_assignments 0",
			"helix_audit_missing_total 0", "helix_lease_reaped_total 0", "helix_id_normalization_changed_total 1"} {
			if !strings.Contains(string(body), "\n"+line+"\n") {
				t.Errorf("/metrics lacks %q:\n%s", line, body)
			}
		}
		// Its value depends on whether the engine acknowledged yet.
		if !strings.Contains(string(body), "\nhelix_stream_pending ") {
			t.Errorf("/metrics lacks helix_stream_pending:\n%s", body)
		}
	})
}

package helix_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
		// The NFD spelling was submitted second: its journal entry keeps
		// it, as a plain JSON string, escaped so that it reads differently.
		nfd := norm.NFD.String(helix.DemoSubmissions[0])
		if len(s.TwinJournal) < 2 || s.TwinJournal[0]["raw_key"] != helix.DemoSubmissions[0] || s.TwinJournal[1]["raw_key"] != nfd {
			t.Errorf("twin journal %v: want raw keys %+q then %+q", s.TwinJournal, helix.DemoSubmissions[0], nfd)
		}
		if !strings.Contains(text, `"raw_key": "Sa\u0308mple-\u03a9-001"`) {
			t.Errorf("run-demo printed\n%s\nwant the NFD raw key escaped as \"Sa\\u0308mple-\\u03a9-001\"", text)
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

// With a worker stopped and submissions waiting in Redis, "submit" and
// "audit" consume nothing: the consumer group gets no new consumer and
// reads no entry, the waiting submissions stay in the streams (plus
// submit's own), and no saga applies them.
func TestSubmitAndAuditDoNotConsume(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		ctx := testCtx(t)
		stop(t, start(t, o)) // a worker ran, and stopped
		a, err := helix.Open(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		for _, id := range []string{"Waiting-001", "Waiting-002"} {
			if err := a.Engine.Publish(ctx, mustEnv(t, "waiting-"+id, helix.Submitted{SampleID: id})); err != nil {
				t.Fatal(err)
			}
		}
		before := streamState(t, o)
		if before.entries != 2 || before.pending != 0 {
			t.Fatalf("before: %+v, want 2 entries waiting, none handed out", before)
		}

		// Not applied, so not in the store: audit says so.
		if code, out, errOut := run(t, append(append([]string{"audit"}, storeArgs(o)...), "--sample", "Waiting-001")...); code != 1 || out != "" || !strings.Contains(errOut, `no batch "Waiting-001"`) {
			t.Fatalf("audit: exit %d, stdout %q, stderr %q; want 1, nothing printed, and that there is no such batch in the store", code, out, errOut)
		}
		if after := streamState(t, o); after != before {
			t.Errorf("after audit: %+v, want %+v (audit consumed)", after, before)
		}
		if code, out, errOut := run(t, append(append([]string{"submit"}, append(storeArgs(o), redisArgs(o)...)...), "Submitted-003")...); code != 0 {
			t.Fatalf("submit: exit %d: %s%s", code, out, errOut)
		}
		want := before
		want.entries++ // submit's own message
		if after := streamState(t, o); after != want {
			t.Errorf("after submit: %+v, want %+v (submit consumed)", after, want)
		}
		rows, err := a.DB.Audit(ctx, "")
		if err != nil || len(rows) != 0 {
			t.Errorf("audit rows %+v (%v), want none: nothing may have applied a submission", rows, err)
		}
	})
}

// submit, audit and run-demo show the NFC and NFD spellings of an ID
// differently (escaped beyond ASCII), and their JSON decodes to the exact
// spellings.
func TestTwinSpellingsVisible(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		ctx := testCtx(t)
		nfd := norm.NFD.String(nfc)
		code, out, errOut := run(t, append(append([]string{"submit"}, append(storeArgs(o), redisArgs(o)...)...), nfc, nfd)...)
		if code != 0 {
			t.Fatalf("submit: exit %d: %s%s", code, out, errOut)
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if len(lines) != 2 || lines[0] == lines[1] ||
			!strings.Contains(lines[0], `"S\u00e4mple-\u03a9-001"`) || !strings.Contains(lines[1], `"Sa\u0308mple-\u03a9-001"`) {
			t.Errorf("submit printed\n%s\nwant the NFC and NFD spellings escaped (S\\u00e4mple, Sa\\u0308mple), on different lines", out)
		}

		a := start(t, o) // a worker applies both
		waitFor(t, "both submissions applied", 30*time.Second, func() bool {
			j, err := a.Journal(ctx, nfc)
			return err == nil && len(j) == 2
		})
		code, out, errOut = run(t, append(append([]string{"audit"}, storeArgs(o)...), "--sample", nfd)...)
		if code != 0 {
			t.Fatalf("audit: exit %d: %s%s", code, out, errOut)
		}
		if !strings.Contains(out, `"S\u00e4mple-\u03a9-001"`) || !strings.Contains(out, `"Sa\u0308mple-\u03a9-001"`) {
			t.Errorf("audit printed\n%s\nwant both spellings escaped (S\\u00e4mple, Sa\\u0308mple)", out)
		}
		var raws []string
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			var v map[string]any
			if err := json.Unmarshal([]byte(line), &v); err != nil {
				t.Fatalf("audit line %q: %v", line, err)
			}
			if raw, ok := v["raw_key"].(string); ok {
				raws = append(raws, raw)
			}
		}
		if !slices.Equal(raws, []string{nfc, nfd}) {
			t.Errorf("audit journal raw keys %+q, want %+q", raws, []string{nfc, nfd})
		}
	})
}

// Each command lists only the flags that mean something to it: --lease
// only where an engine applies assignments, --redis not for audit.
func TestFlagsPerCommand(t *testing.T) {
	for _, c := range []struct {
		cmd       string
		want, not []string
	}{
		{"submit", []string{"-store", "-redis"}, []string{"-lease"}},
		{"audit", []string{"-store", "-sample"}, []string{"-lease", "-redis", "-namespace"}},
		{"worker", []string{"-store", "-redis", "-lease"}, nil},
		{"run-demo", []string{"-store", "-redis", "-lease"}, nil},
	} {
		code, _, help := run(t, c.cmd, "--help")
		if code != 2 {
			t.Errorf("%s --help: exit %d, want 2", c.cmd, code)
		}
		for _, f := range c.want {
			if !strings.Contains(help, "  "+f+" ") {
				t.Errorf("%s --help lacks %s:\n%s", c.cmd, f, help)
			}
		}
		for _, f := range c.not {
			if strings.Contains(help, "  "+f+" ") {
				t.Errorf("%s --help lists %s, which does nothing there:\n%s", c.cmd, f, help)
			}
		}
	}
}

// An error is printed once, with one "helixqueue:" prefix.
func TestErrorPrefixOnce(t *testing.T) {
	db := filepath.Join(t.TempDir(), "x.db")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"submit", "--store", db, "ID-1"}, "helixqueue: --store and --redis are required\n"},
		{[]string{"submit", "--store", db, "--redis", "redis://127.0.0.1:1/0", "a\x00b"}, "helixqueue: sample ID "},
		{[]string{"audit", "--sample", "x"}, "helixqueue: --store is required\n"},
	} {
		code, _, errOut := run(t, c.args...)
		if code != 1 || !strings.HasPrefix(errOut, c.want) || strings.Count(errOut, "helixqueue:") != 1 {
			t.Errorf("%q: exit %d, stderr %q; want 1 and one line starting %q", c.args, code, errOut, c.want)
		}
	}
}

// audit only reads: pointed at a store that does not exist it says so,
// exits 1 and creates nothing; asked for a batch the store does not hold,
// it says so too.
func TestAuditReadsOnly(t *testing.T) {
	eachStore(t, func(t *testing.T, o helix.Options) {
		ctx := testCtx(t)
		code, out, errOut := run(t, append([]string{"audit"}, storeArgs(o)...)...)
		if code != 1 || out != "" || !strings.Contains(errOut, "no HelixQueue store") || !strings.Contains(errOut, "audit only reads") {
			t.Errorf("audit of a missing store: exit %d, stdout %q, stderr %q; want exit 1 saying there is no store", code, out, errOut)
		}
		if exists := storeExists(t, o); exists {
			t.Fatalf("audit of a missing store created it (%s)", o.Store)
		}

		a := start(t, o)
		if _, err := a.Submit(ctx, "Real-001"); err != nil {
			t.Fatal(err)
		}
		code, out, errOut = run(t, append(append([]string{"audit"}, storeArgs(o)...), "--sample", "nosuch")...)
		if code != 1 || out != "" || !strings.Contains(errOut, `no batch "nosuch"`) {
			t.Errorf("audit --sample nosuch: exit %d, stdout %q, stderr %q; want exit 1 saying there is no such batch", code, out, errOut)
		}
		if code, out, errOut = run(t, append(append([]string{"audit"}, storeArgs(o)...), "--sample", "Real-001")...); code != 0 || !strings.Contains(out, "Real-001") {
			t.Errorf("audit --sample Real-001: exit %d, stdout %q, stderr %q; want its rows", code, out, errOut)
		}
	})
}

// storeExists reports whether o's store exists: the SQLite file, or the
// PostgreSQL schema.
func storeExists(t *testing.T, o helix.Options) bool {
	t.Helper()
	if !strings.HasPrefix(o.Store, "postgres") {
		_, err := os.Stat(o.Store)
		return err == nil
	}
	conn, err := pgx.Connect(testCtx(t), o.Store)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var n int
	if err := conn.QueryRow(testCtx(t), `SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1`, o.Schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// helixqueue --help prints the commands on stdout and exits 0.
func TestHelp(t *testing.T) {
	for _, arg := range []string{"--help", "-h", "help"} {
		code, out, errOut := run(t, arg)
		if code != 0 || !strings.Contains(out, "usage: helixqueue") || !strings.Contains(out, "audit") || errOut != "" {
			t.Errorf("helixqueue %s: exit %d, stdout %q, stderr %q; want the usage on stdout and exit 0", arg, code, out, errOut)
		}
	}
}

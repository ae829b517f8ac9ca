package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

func run(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := Run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestDemoPassesAndReportsFromTheStore(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "demo", "--searches", "300", "--json", "--seed", "7")
	if code != 0 {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var r demoReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out)
	}
	if !r.Pass || r.DuplicateEffects != 0 || r.LostMessages != 0 {
		t.Fatalf("report %+v: want pass with 0 duplicate effects and 0 lost", r)
	}
	if r.Completed+r.Errored != 300 {
		t.Errorf("completed %d + error %d, want 300 sagas", r.Completed, r.Errored)
	}
	if r.DuplicatesInjected == 0 || r.Kills < 3 {
		t.Errorf("duplicates injected %d, worker kills %d: want duplicates and at least 3 SIGKILLs", r.DuplicatesInjected, r.Kills)
	}
	if r.DeadLetters["malformed_body"] != 5 || r.DeadLetters["unknown_type"] != 5 || r.DeadLetters["invalid_key"] != 6 {
		t.Errorf("dead letters %v, want malformed_body 5, unknown_type 5, invalid_key 6", r.DeadLetters)
	}
}

func TestDemoInMemoryWithLostAcks(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "demo", "--store", "memory", "--searches", "300", "--json", "--lose-acks", "0.05")
	if code != 0 {
		t.Fatalf("exit %d, want 0\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	}
	var r demoReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, out)
	}
	if !r.Pass || r.AcksLost == 0 || r.Redeliveries == 0 {
		t.Fatalf("report %+v: want pass with lost acks and redeliveries injected", r)
	}
}

func TestDemoTextReport(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, "demo", "--store", "memory", "--searches", "50", "--progress=false", "--lose-acks", "0")
	if code != 0 {
		t.Fatalf("exit %d, want 0\n%s", code, out)
	}
	for _, want := range []string{"duplicate effects", "0  ok", "lost messages", "dead letters by reason", "PASS"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
}

func TestDemoRefusesBadFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"demo", "--searches", "0"},
		{"demo", "--lose-acks", "1.5"},
		{"demo", "--replicas", "-1"},
		{"demo", "--store", "mongodb"},
		{"demo", "--store", "memory", "--serve"},
	} {
		code, _, errOut := run(t, args...)
		if code != 2 || !strings.Contains(errOut, "--") {
			t.Errorf("%v: exit %d, stderr %q; want 2 and a message naming the flag", args, code, errOut)
		}
	}
}

func TestGraph(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, "graph")
	if code != 0 || out != "order\nsearchimport\n" {
		t.Fatalf("graph list: exit %d, out %q", code, out)
	}
	code, out, _ = run(t, "graph", "searchimport")
	if code != 0 || !strings.HasPrefix(out, "stateDiagram-v2\n") || !strings.Contains(out, "Uploading --> Uploaded: SearchUploadSaved") {
		t.Fatalf("graph mermaid: exit %d, out %q", code, out)
	}
	code, out, _ = run(t, "graph", "searchimport", "--format", "dot")
	if code != 0 || !strings.HasPrefix(out, `digraph "searchimport"`) {
		t.Fatalf("graph dot: exit %d, out %q", code, out)
	}
	code, _, errOut := run(t, "graph", "nope")
	if code != 2 || !strings.Contains(errOut, "known types are order, searchimport") {
		t.Fatalf("graph unknown: exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = run(t, "graph", "searchimport", "--format", "png")
	if code != 2 || !strings.Contains(errOut, "use mermaid, dot or json") {
		t.Fatalf("graph bad format: exit %d, stderr %q", code, errOut)
	}
}

// graph draws every saga type idem serve registers.
func TestGraphKnowsEverySagaServeRegisters(t *testing.T) {
	t.Parallel()
	st := memstore.New(nil)
	e, err := idem.NewEngine(st, memtransport.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := registerServe(e, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	for name := range e.Sagas() {
		if code, out, errOut := run(t, "graph", name); code != 0 || !strings.HasPrefix(out, "stateDiagram-v2") {
			t.Errorf("graph %s: exit %d, out %q, err %q", name, code, out, errOut)
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, "version")
	if code != 0 || !strings.HasPrefix(out, "idem ") {
		t.Fatalf("version: exit %d, out %q", code, out)
	}
	code, flagOut, errOut := run(t, "--version")
	if code != 0 || flagOut != out {
		t.Fatalf("--version: exit %d, out %q, err %q; want %q as idem version prints", code, flagOut, errOut, out)
	}
}

func TestUnknownCommandIsUsageError(t *testing.T) {
	t.Parallel()
	if code, _, _ := run(t, "frobnicate"); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
}

// TestMain lets the test binary serve as the demo's worker process:
// runSQLiteDemo starts os.Executable() with "demo-worker", and idem bench
// --replicas with "bench-replica".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && (os.Args[1] == "demo-worker" || os.Args[1] == "bench-replica") {
		os.Exit(Run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

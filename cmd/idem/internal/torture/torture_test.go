package torture

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(WorkerEnv) != "" {
		os.Exit(RunWorkerFromEnv(openTestBroker))
	}
	os.Exit(m.Run())
}

// workerCommand starts this test binary as a worker (TestMain routes it).
func workerCommand() *exec.Cmd { return exec.Command(os.Args[0], "-test.run=^$") }

func run(t *testing.T, o Options) *Report {
	t.Helper()
	o.Command = workerCommand
	o.OpenTransport = openTestBroker
	o.Dir = t.TempDir()
	if o.Settle == 0 {
		o.Settle = 90 * time.Second
	}
	r, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	r.Print(&b)
	t.Log("\n" + b.String())
	return r
}

func TestTortureSQLitePasses(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process run of several seconds")
	}
	r := run(t, Options{Store: "sqlite", Duration: 8 * time.Second, Seed: 7, MinKills: 3})
	if !r.Pass() {
		t.Fatalf("run failed: %v %v", r.Problems, r.Violations)
	}
	if r.Ticks.Fired == 0 {
		t.Errorf("no schedule tick fired: %+v", r.Ticks)
	}
	for _, f := range []string{"SIGKILL by the driver", "duplicate copies published", "bad inputs", "duplicate schedule ticks"} {
		if r.Faults[f] == 0 {
			t.Errorf("fault %q never injected: %v", f, r.Faults)
		}
	}
	if r.Journal == 0 || r.Sent == 0 {
		t.Errorf("no work: sent %d, journal %d", r.Sent, r.Journal)
	}
}

// The checker is known to be able to fail: each deliberate breakage of the
// engine's guarantees makes it report the violation that names the cause.
func TestCheckerCatchesBreakage(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process runs of several seconds")
	}
	type cause struct{ invariant, detail string }
	for _, tc := range []struct {
		breakage string
		causes   []cause // any of them names the cause
	}{
		{BreakSkipInbox, []cause{{InvAtMostOnce, "the inbox did not stop a duplicate"}}},
		// A message acknowledged before its commit and lost with a killed
		// worker is a message the driver sent that never applied, or a
		// handler's reply (an emitted message) that was never consumed:
		// which one depends on where the kills land.
		{BreakAckBeforeCommit, []cause{{InvExactlyOnce, "never applied (lost)"}, {InvEmitted, "was not consumed"}}},
	} {
		t.Run(tc.breakage, func(t *testing.T) {
			o := Options{Store: "sqlite", Duration: 6 * time.Second, Seed: 3, Break: tc.breakage, Settle: 20 * time.Second}
			if tc.breakage == BreakAckBeforeCommit {
				// Without duplicates every message sent has one copy, so
				// each crash between receive and commit loses what it
				// held: the loss shows even when few crashes land (a
				// loaded machine).
				o.Faults = slices.DeleteFunc(slices.Clone(AllFaults), func(f string) bool { return f == FaultDuplicates })
			}
			r := run(t, o)
			if r.Pass() {
				t.Fatal("the checker passed a broken engine")
			}
			found := false
			for _, v := range r.Violations {
				for _, c := range tc.causes {
					if !found && v.Invariant == c.invariant && strings.Contains(v.Detail, c.detail) && v.Key != "" && len(v.Messages) > 0 {
						found = true
						t.Logf("violation naming the cause: %s", v)
					}
				}
			}
			if !found {
				t.Errorf("no violation naming a saga, a message and one of %v among %d violations", tc.causes, len(r.Violations))
			}
		})
	}
}

func TestTorturePostgres(t *testing.T) {
	url := testenv.PostgresURL(t)
	if testing.Short() {
		t.Skip("multi-process run of several seconds")
	}
	r := run(t, Options{Store: url, Duration: 8 * time.Second, Seed: 11, MinKills: 3})
	if !r.Pass() {
		t.Fatalf("run failed: %v %v", r.Problems, r.Violations)
	}
}

func TestOptionsRefused(t *testing.T) {
	for _, o := range []Options{
		{Store: "memory", Duration: time.Second, Command: workerCommand},
		{Store: "mysql://x", Duration: time.Second, Command: workerCommand},
		{Store: "sqlite", Duration: time.Second, Command: workerCommand, Faults: []string{"meteor"}},
		{Store: "sqlite", Duration: 0, Command: workerCommand},
	} {
		if _, err := Run(context.Background(), o); err == nil {
			t.Errorf("Run(%+v) accepted", o)
		}
	}
}

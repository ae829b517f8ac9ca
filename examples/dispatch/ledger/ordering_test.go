package ledger_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/dispatch/ledger"
)

// dyingEnv marks a child process of this test binary that runs a writer
// which kills itself (SIGKILL) in its first transition that appends to the
// ledger, after the inserts and before the commit; the value is a JSON
// dyingWriter.
const dyingEnv = "DISPATCH_TEST_DYING_WRITER"

// dyingMark starts the line the dying writer prints before it dies,
// followed by the patient and seq of the event it was appending.
const dyingMark = "dying in the append of "

// dyingWriter is what a dying child writer is told.
type dyingWriter struct {
	DSN, Schema string
	Lease       time.Duration
	Events      []ledger.Event
}

// runDyingWriter is the dying child's main: it publishes the events, applies
// them one message per batch, and SIGKILLs itself in its first append.
func runDyingWriter(arg string) int {
	var d dyingWriter
	if err := json.Unmarshal([]byte(arg), &d); err != nil {
		fmt.Fprintln(os.Stderr, "bad dying writer args:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	die := func(_ context.Context, ev ledger.Event) error {
		fmt.Fprintf(os.Stderr, "%s%s %d\n", dyingMark, ev.Patient, ev.Seq)
		return syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	w, err := ledger.OpenWriter(ctx, ledger.WriterConfig{DSN: d.DSN, Schema: d.Schema, Name: "doomed", Lease: d.Lease,
		AfterAppend: die, Engine: &idem.Config{BatchSize: 1, RetryBase: 20 * time.Millisecond, RetryMax: time.Second}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := w.Publish(ctx, d.Events); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	<-ctx.Done()
	fmt.Fprintln(os.Stderr, "the dying writer never appended")
	return 3
}

// settings of the writers of these tests: the backoff of "dispatch write".
func testEngine() *idem.Config {
	return &idem.Config{RetryBase: 20 * time.Millisecond, RetryMax: time.Second}
}

// A writer is SIGKILLed in the transition that accepts a patient's first
// event, after inserting its ledger row and notification and before the
// commit: neither the rows nor the state change are there afterwards, and
// the event is invisible for the queue's lease. The other writer receives
// the patient's later events meanwhile, which wait for the missing
// predecessor longer than a fixed short retry budget allows (the lease here
// is 3s; ten retries 100ms apart gave up after one). They must wait the
// lease out, not be dead-lettered: the ledger ends complete, each event
// once.
func TestEventsWaitOutACrashedWritersLease(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		const lease = 3 * time.Second
		raw, _, _ := scenario(2)
		p := pseudonymizer(t)
		var evs []ledger.Event
		for _, r := range raw {
			ev, err := p.Pseudonymize(r)
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, ev)
		}
		openDB(t, b)
		arg, _ := json.Marshal(dyingWriter{DSN: b.dsn, Schema: b.schema, Lease: lease, Events: evs})
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), dyingEnv+"="+string(arg))
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("dying writer ended with %v, want SIGKILL; output:\n%s", err, out)
		}
		_, dead, ok := strings.Cut(string(out), dyingMark)
		var pn string
		var seq int64
		if _, err := fmt.Sscan(dead, &pn, &seq); !ok || err != nil || seq != 1 {
			t.Fatalf("the dying writer did not say what it was appending (%v); output:\n%s", err, out)
		}

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		w, err := ledger.OpenWriter(ctx, ledger.WriterConfig{DSN: b.dsn, Schema: b.schema, Name: "survivor", Lease: lease, Engine: testEngine()})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close(context.Background())
		rows, notes := ledgerOf(t, openDB(t, b), pn)
		if snap, err := w.Patient(ctx, pn); err != nil || snap != nil || len(rows) != 0 || len(notes) != 0 {
			t.Fatalf("after the crash: saga %+v (%v), %d ledger rows and %d notifications of the patient; want none", snap, err, len(rows), len(notes))
		}
		start := time.Now()
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.Wait(ctx, evs); err != nil {
			t.Fatal(err)
		}
		st := w.Engine().Stats()
		t.Logf("settled in %s; survivor stats %+v", time.Since(start), st)
		if st.DeadLettered != 0 {
			t.Errorf("%d messages dead-lettered, want none", st.DeadLettered)
		}
		if st.Retries == 0 {
			t.Errorf("no retries: no event waited for the crashed writer's claim")
		}
		code, rep := validate(t, b)
		if code != 0 || !rep.OK() || rep.Rows != len(evs) || rep.Notifications != len(evs) {
			t.Fatalf("validate exit %d, %d rows and %d notifications (want %d), violations %+v", code, rep.Rows, rep.Notifications, len(evs), rep.Violations)
		}
	})
}

// An event that arrives before its predecessor waits for it longer than a
// fixed budget of ten retries 200ms apart: it is applied, not dead-lettered,
// when the predecessor comes after the early one was retried ten times.
func TestEarlyEventWaitsForALatePredecessor(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		pn, _ := pseudonymizer(t).Pseudonym(rawID(1))
		first := ledger.Event{Patient: pn, Seq: 1, Kind: ledger.Requested}
		early := ledger.Event{Patient: pn, Seq: 2, Kind: ledger.Confirmed}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		w, err := ledger.OpenWriter(ctx, ledger.WriterConfig{DSN: b.dsn, Schema: b.schema, Engine: testEngine()})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Close(context.Background())
		if err := w.Start(ctx); err != nil {
			t.Fatal(err)
		}
		if err := w.Publish(ctx, []ledger.Event{early}); err != nil {
			t.Fatal(err)
		}
		// Poll the engine's counters (they change on its goroutines) until
		// the early event was retried ten times.
		for st := w.Engine().Stats(); st.Retries < 10; st = w.Engine().Stats() {
			if st.DeadLettered > 0 {
				t.Fatalf("the early event was dead-lettered after %d retries", st.Retries)
			}
			select {
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
		if err := w.Publish(ctx, []ledger.Event{first}); err != nil {
			t.Fatal(err)
		}
		if err := w.Wait(ctx, []ledger.Event{first, early}); err != nil {
			t.Fatal(err)
		}
		if st := w.Engine().Stats(); st.DeadLettered != 0 {
			t.Errorf("stats %+v: want nothing dead-lettered", st)
		}
		code, rep := validate(t, b)
		if code != 0 || rep.Rows != 2 {
			t.Fatalf("validate exit %d, %d rows (want 2), violations %+v", code, rep.Rows, rep.Violations)
		}
	})
}

// OpenWriter sizes MaxAttempts for twice the lease, and refuses fewer.
func TestWriterAttemptsCoverTheLease(t *testing.T) {
	// Minimal waits of 10, 20, 40, 80, 160, 320ms then 500ms each reach
	// 60s after 7 + 118 waits: 126 deliveries.
	if n := ledger.OrderingAttempts(20*time.Millisecond, time.Second, ledger.OrderingWindow(30*time.Second)); n != 126 {
		t.Errorf("OrderingAttempts = %d, want 126", n)
	}
	_, err := ledger.OpenWriter(context.Background(), ledger.WriterConfig{DSN: t.TempDir() + "/d.db",
		Engine: &idem.Config{MaxAttempts: 10}})
	if err == nil {
		t.Fatal("OpenWriter accepted MaxAttempts 10 with a 30s lease")
	}
}

package enginetest

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"reflect"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/transport"
)

// RunWorker is the body of a worker process: it opens its store (which is
// also the queue), runs the counter engine until SIGTERM, stops it and
// returns the process exit code. Call it from TestMain when the test binary
// was started as a worker.
func RunWorker(open func(ctx context.Context) (store.Queue, error)) int {
	return runWorker(func(ctx context.Context) (store.Store, transport.Transport, error) {
		q, err := open(ctx)
		return q, q, err
	})
}

// RunSagaWorker is RunWorker with the counter saga alone (NewSagaEngine),
// and two consumers of a lane each on partitions of the keys: the engine
// claims a backlog inside its units of work on a store that can. The store's queue must not hand the saga's
// events to it (see NewSagaEngine).
func RunSagaWorker(open func(ctx context.Context) (store.Queue, error)) int {
	return runEngine(func(ctx context.Context) (store.Store, transport.Transport, error) {
		q, err := open(ctx)
		return q, q, err
	}, func(st store.Store, tr transport.Transport) *idem.Engine {
		return NewSagaEngine(workerTB{}, st, tr, &idem.Config{BatchSize: 16, Lanes: 2, Consumers: 2, PartitionedReceive: true})
	})
}

// RunWorkerOn is RunWorker for a store and a separate transport (a broker):
// open returns both, and both are closed when the worker stops.
func RunWorkerOn(open func(ctx context.Context) (store.Store, transport.Transport, error)) int {
	return runWorker(open)
}

// runWorker runs the counter engine on what open returns. The store is
// passed to the engine as the transport itself when it is the queue, so
// that the engine consumes in its units of work (a wrapper would hide that
// and make it relay through the outbox instead).
func runWorker(open func(ctx context.Context) (store.Store, transport.Transport, error)) int {
	return runEngine(open, func(st store.Store, tr transport.Transport) *idem.Engine {
		return NewEngine(workerTB{}, st, tr, &idem.Config{BatchSize: 16, Lanes: 2})
	})
}

// runEngine runs the engine newEngine builds on what open returns until
// SIGTERM.
func runEngine(open func(ctx context.Context) (store.Store, transport.Transport, error), newEngine func(store.Store, transport.Transport) *idem.Engine) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	SignalReady()
	st, tr, err := open(ctx)
	if err != nil && ctx.Err() != nil {
		return 0 // stopped while still opening (waiting for a restarted broker, say)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	defer st.Close()
	if !sameQueue(st, tr) {
		defer tr.Close()
	}
	e := newEngine(st, tr)
	if err := e.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 1
	}
	return 0
}

// readyEnv names the worker's file descriptor on which it reports that it
// handles SIGTERM (StartWorker).
const readyEnv = "IDEM_TEST_WORKER_READY_FD"

// SignalReady tells StartWorker that SIGTERM now stops this worker
// process cleanly: call it right after installing the handler (a worker
// not started by StartWorker ignores it).
func SignalReady() {
	fd, err := strconv.Atoi(os.Getenv(readyEnv))
	if err != nil {
		return
	}
	if f := os.NewFile(uintptr(fd), "ready"); f != nil {
		_, _ = f.WriteString("ready\n")
		_ = f.Close()
	}
}

// StartWorker starts this test binary as a worker process with env added
// (TestMain must route it to RunWorker, RunSagaWorker, RunWorkerOn or a
// worker of its own that calls SignalReady) and returns once the worker
// handles SIGTERM, so that a SIGTERM sent at once stops it cleanly instead
// of killing it before its handler is installed. It fails t when the
// worker exits or is not ready within two minutes. A worker the test has
// not waited for by the end of the test is killed then.
func StartWorker(t testing.TB, env ...string) *exec.Cmd {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), env...), readyEnv+"=3")
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = []*os.File{w} // fd 3 in the worker
	err = cmd.Start()
	_ = w.Close()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	_ = r.SetReadDeadline(time.Now().Add(2 * time.Minute))
	line, err := bufio.NewReader(r).ReadString('\n')
	if line != "ready\n" {
		_ = cmd.Process.Kill()
		werr := cmd.Wait()
		t.Fatalf("worker process did not report ready (%v; exit: %v)", err, werr)
	}
	return cmd
}

// sameQueue reports whether tr is st itself, as its own queue.
func sameQueue(st store.Store, tr transport.Transport) bool {
	q, ok := st.(store.Queue)
	return ok && reflect.TypeOf(q).Comparable() && reflect.TypeOf(tr).Comparable() && transport.Transport(q) == tr
}

// workerTB lets NewEngine run in a worker process, outside any test.
type workerTB struct{ testing.TB }

func (workerTB) Helper() {}
func (workerTB) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, append([]any{"worker:"}, args...)...)
	os.Exit(2)
}

// SurviveSIGKILL starts three worker processes (this test binary with env
// added, which TestMain must route to RunWorker), publishes every message
// three times through producer, kills one worker with SIGKILL once a third
// of the work is journaled and restarts it, waits for the queue to drain,
// stops the workers and checks exactly-once from the database.
func SurviveSIGKILL(t *testing.T, st store.Store, producer *idem.Engine, q QueryRow, env ...string) {
	t.Helper()
	SurviveSIGKILLOn(t, KillRun{Store: st, Producer: producer, Query: q, Env: env})
}

// KillRun describes a multi-process run for SurviveSIGKILLOn.
type KillRun struct {
	// Store is the store the workers share; Producer publishes the workload.
	Store    store.Store
	Producer *idem.Engine
	// Query reads the store's database.
	Query QueryRow
	// Env is added to the worker processes' environment; TestMain must
	// route a process with it to RunWorker, RunSagaWorker, RunWorkerOn or
	// a worker of its own that calls SignalReady (see StartWorker).
	Env []string
	// Settled reports whether nothing is left in flight. Nil means the
	// SQL queue's check (idem_queue and idem_timers empty); a broker run
	// also checks the broker and the outbox.
	Settled func() (bool, error)
	// Disrupt, when set, runs once after the SIGKILL and restart, while
	// work is in flight (for example a broker restart).
	Disrupt func(t *testing.T)
	// Check checks exactly-once at the end. Nil means CheckExactlyOnce;
	// workers without a consumer of the emitted events (RunSagaWorker)
	// need CheckSagasExactlyOnce.
	Check func(t *testing.T, st store.Store, q QueryRow, want map[string]int, perKey int)
}

// SurviveSIGKILLOn is SurviveSIGKILL for any store and transport.
func SurviveSIGKILLOn(t *testing.T, r KillRun) {
	t.Helper()
	st, producer, q, env := r.Store, r.Producer, r.Query, r.Env
	start := func() *exec.Cmd { return StartWorker(t, env...) }
	workers := []*exec.Cmd{start(), start(), start()}

	const keys, perKey = 60, 8
	want := Workload(t, []*idem.Engine{producer}, keys, perKey, 3)

	deadline := time.Now().Add(60 * time.Second)
	for {
		var n int
		if err := q(`SELECT count(*) FROM idem_journal`, &n); err != nil {
			t.Fatal(err)
		}
		if n >= keys*perKey/3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("workers made no progress: %d journal entries", n)
		}
		time.Sleep(2 * time.Millisecond) // polling a condition with a deadline
	}
	if err := workers[0].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = workers[0].Wait()
	t.Log("worker 0 killed with SIGKILL; restarting it")
	workers[0] = start()
	if r.Disrupt != nil {
		r.Disrupt(t)
	}

	if r.Settled == nil {
		WaitSettled(t, q, 90*time.Second)
	} else {
		WaitFor(t, 90*time.Second, "queue and timers drained", r.Settled)
	}
	for _, w := range workers {
		_ = w.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		if err := w.Wait(); err != nil {
			t.Errorf("worker exit: %v", err)
		}
	}
	check := r.Check
	if check == nil {
		check = CheckExactlyOnce
	}
	check(t, st, q, want, perKey)
}

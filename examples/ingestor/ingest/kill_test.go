package ingest_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idemhq/idem/examples/ingestor/ingest"
	"github.com/idemhq/idem/internal/enginetest"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/sqlitestore"
)

// killChunkSize is the chunk size of the worker-kill test, shared by the
// API in the test process and the worker processes.
const killChunkSize = 20

func TestMain(m *testing.M) {
	if db := os.Getenv("INGESTOR_TEST_DB"); db != "" {
		os.Exit(runWorker(db, os.Getenv("INGESTOR_TEST_PG_SCHEMA")))
	}
	os.Exit(m.Run())
}

// runWorker is a worker process of the kill test: it imports until SIGTERM.
func runWorker(db, schema string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	enginetest.SignalReady()
	var (
		q   store.Queue
		err error
	)
	if strings.HasPrefix(db, "postgres") {
		q, err = pgstore.Open(ctx, db, &pgstore.Config{Schema: schema, Lease: 3 * time.Second, PollInterval: 50 * time.Millisecond, Logger: quiet()})
	} else {
		q, err = sqlitestore.Open(ctx, db, &sqlitestore.Config{Lease: 3 * time.Second, PollInterval: 20 * time.Millisecond, Logger: quiet()})
	}
	if err != nil && ctx.Err() != nil {
		return 0 // stopped while opening
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	defer q.Close()
	cfg := engineConfig()
	cfg.BatchSize = 4
	app, err := ingest.New(q, &ingest.Config{ChunkSize: killChunkSize, Engine: cfg, Logger: quiet()})
	if err == nil {
		err = app.Start(ctx)
	}
	if err != nil && ctx.Err() != nil {
		return 0 // stopped while starting
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		return 2
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := app.Stop(sctx); err != nil {
		fmt.Fprintln(os.Stderr, "worker stop:", err)
		return 1
	}
	return 0
}

// A worker process is killed with SIGKILL in the middle of a file and
// restarted: every line is imported once, no chunk twice, none lost.
func testWorkerKilled(t *testing.T, b backend) {
	q, env := b.open(t)
	h := newHarness(t, q, &ingest.Config{ChunkSize: killChunkSize}, false) // the API only
	start := func() *exec.Cmd { return enginetest.StartWorker(t, env...) }
	workers := []*exec.Cmd{start(), start()}

	const lines = 6000 // 300 chunks
	r := h.upload(t, "ACME", makeCSV(lines, "killed", nil))
	if r.code != http.StatusCreated {
		t.Fatalf("upload: %d %s", r.code, r.body)
	}
	id := r.job(t).ID
	v := h.waitJob(t, id, "a fifth of the chunks", func(v *ingest.JobView) bool { return v.Chunks.Imported >= v.Chunks.Total/5 })
	if v.Chunks.Pending == 0 {
		t.Fatalf("the workers finished before the kill: make the file bigger")
	}
	if err := workers[0].Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = workers[0].Wait()
	t.Logf("worker killed with %d of %d chunks imported; restarting it", v.Chunks.Imported, v.Chunks.Total)
	workers[0] = start()

	v = h.waitTerminal(t, id)
	for _, w := range workers {
		_ = w.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		if err := w.Wait(); err != nil {
			t.Errorf("worker exit: %v", err)
		}
	}
	if v.Status != string(ingest.Succeeded) || v.Lines.Imported != lines {
		t.Fatalf("job: %s %+v", v.Status, v.Lines)
	}
	checkChunks(t, h.app, v, lines)
	// Nothing was dead-lettered.
	dls, err := q.ListDeadLetters(context.Background(), &store.ListParams{Limit: 10})
	if err != nil || len(dls) != 0 {
		t.Fatalf("dead letters: %+v (%v)", dls, err)
	}
}

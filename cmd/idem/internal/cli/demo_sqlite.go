package cli

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/searchimport"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
)

// The embedded demo: the store and queue are one SQLite file; worker
// processes consume it and are killed with SIGKILL at random moments.

const demoLease = 2 * time.Second

// openEffects opens the parser's own database, where it records every
// command it receives. It is the parser's, not Idem's: a downstream service
// with its own storage.
func openEffects(path string) (*sql.DB, error) {
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)")
	if err != nil {
		return nil, err
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`CREATE TABLE IF NOT EXISTS parse_commands (id TEXT PRIMARY KEY, search TEXT NOT NULL, file TEXT NOT NULL, runs INTEGER NOT NULL DEFAULT 1)`); err != nil {
		db.Close()
		return nil, fmt.Errorf("parser database %s: %w", path, err)
	}
	return db, nil
}

func runSQLiteDemo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) error {
	start := time.Now()
	path := o.db
	if path == "" {
		dir, err := os.MkdirTemp("", "idem-demo-")
		if err != nil {
			return &exitError{code: 2, err: fmt.Errorf("create a temporary directory: %w (set TMPDIR or pass --db PATH)", err)}
		}
		defer os.RemoveAll(dir)
		path = filepath.Join(dir, "idem.db")
	} else if _, err := os.Stat(path); err == nil {
		return usageErrorf("--db %s already exists: the demo needs a fresh database; remove it or choose another path", path)
	}
	st, err := sqlitestore.Open(ctx, path, &sqlitestore.Config{Lease: demoLease, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer st.Close()
	effectsPath := path + ".parser"
	effects, err := openEffects(effectsPath)
	if err != nil {
		return &exitError{code: 2, err: err}
	}
	defer effects.Close()

	rng := rand.New(rand.NewPCG(o.seed, 0x1de))
	kinds := demoKinds(o.searches)
	e0, err := idem.NewEngine(st, st, nil) // for envelopes and publishing only
	if err != nil {
		return err
	}
	if err := e0.Register(searchimport.New(searchimport.Config{}).Machine); err != nil {
		return err
	}
	envs, injected, expectedDead := demoWorkload(o, rng, kinds, e0)
	plan := newKillPlan(envs, o.searches, o.kills)
	if err := publishAll(ctx, e0, plan.shares[0]); err != nil {
		return err
	}

	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find the idem executable to start workers: %w", err)
	}
	workerErr := &syncWriter{w: stderr}
	startWorker := func() (*exec.Cmd, error) {
		cmd := exec.Command(exe, "demo-worker", "--db", path, "--searches", fmt.Sprint(o.searches))
		cmd.Stderr = workerErr
		return cmd, cmd.Start()
	}
	workers := make([]*exec.Cmd, o.replicas)
	for i := range workers {
		if workers[i], err = startWorker(); err != nil {
			return fmt.Errorf("start worker: %w", err)
		}
	}
	defer func() {
		for _, w := range workers {
			if w != nil && w.ProcessState == nil {
				_ = w.Process.Kill()
				_ = w.Wait()
			}
		}
	}()

	bar := newProgress(o.progress && !o.json, stderr, workerErr, o.searches)
	queue, err := sql.Open("sqlite", "file:"+path+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer queue.Close()

	kills := 0
	nextKill := time.Now().Add(time.Duration(200+rng.IntN(400)) * time.Millisecond)
	deadline := time.Now().Add(o.timeout)
	tick := time.NewTicker(cmp.Or(o.poll, demoPoll))
	defer tick.Stop()
	for {
		finished, err := countFinished(ctx, st)
		if err != nil {
			return err
		}
		var queued int
		if err := queue.QueryRowContext(ctx, `SELECT count(*) FROM idem_queue`).Scan(&queued); err != nil {
			return fmt.Errorf("read the queue: %w", err)
		}
		if bar != nil {
			bar.Set(finished)
		}
		if finished == o.searches && queued == 0 && plan.delivered() {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(workerErr, "\nidem demo: not settled after %s: %d/%d sagas finished, %d messages queued\n", o.timeout, finished, o.searches, queued)
			break
		}
		if err := publishAll(ctx, e0, plan.next(finished)); err != nil {
			return err
		}
		// The --kills SIGKILLs come on progress (killPlan), so that a run
		// of any speed gets them all; more come at random moments on a
		// longer run.
		due := plan.due(finished)
		if o.kills > 0 && (due || time.Now().After(nextKill)) {
			// SIGKILL a random worker, wherever it is: between a commit and
			// an ack, mid-commit, or idle; then restart it.
			i := rng.IntN(len(workers))
			_ = workers[i].Process.Signal(syscall.SIGKILL)
			_ = workers[i].Wait()
			kills++
			if due {
				plan.done++
			}
			if workers[i], err = startWorker(); err != nil {
				return fmt.Errorf("restart worker: %w", err)
			}
			nextKill = time.Now().Add(time.Duration(300+rng.IntN(900)) * time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	if bar != nil {
		bar.Finish()
	}
	for _, w := range workers {
		_ = w.Process.Signal(syscall.SIGTERM)
	}
	for _, w := range workers {
		if err := w.Wait(); err != nil {
			fmt.Fprintf(workerErr, "idem demo: worker exited: %v\n", err)
		}
	}

	commands, err := readCommands(ctx, effects)
	if err != nil {
		return err
	}
	r, err := buildReport(ctx, o, st, commands, kinds, expectedDead)
	if err != nil {
		return err
	}
	r.Store = "sqlite " + path
	if o.db == "" {
		r.Store = "sqlite (temporary file)"
	}
	r.Transport = "the same SQLite file (transactional queue)"
	r.Published, r.DuplicatesInjected, r.Kills = int64(len(envs)), injected, kills
	if err := queue.QueryRowContext(ctx, `SELECT count(*) FROM idem_journal`).Scan(&r.Applied); err != nil {
		return fmt.Errorf("read the journal: %w", err)
	}
	if o.kills > 0 && kills < o.kills {
		r.Violations = append(r.Violations, fmt.Sprintf("only %d SIGKILLs before the run gave up, want %d", kills, o.kills))
		r.Pass = false
	}
	r.Elapsed = time.Since(start).Round(time.Millisecond).String()
	err = finishReport(r, o, stdout)
	if !o.json && !o.serve {
		printNextSteps(stdout, o.db)
	}
	if o.serve {
		scheme := "http"
		if o.web.tlsCert != "" {
			scheme = "https"
		}
		fmt.Fprintf(stderr, "idem demo: serving the demo's database; open the console at %s://%s/ (API under /api/, interrupt to stop)\n", scheme, o.web.addr)
		st.Close()
		web := o.web
		web.store, web.maxBody = storeFlags{url: "sqlite://" + path}, 1<<20
		if serr := runServe(ctx, &web, stderr); serr != nil {
			return serr
		}
	}
	return err
}

// syncWriter serialises the writes of several worker processes' stderr,
// and the demo's own once they run: a killed worker's copier may still be
// writing when the demo reports.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// readCommands returns, from the parser's database, the command IDs it
// received for each search/file.
func readCommands(ctx context.Context, db *sql.DB) (map[string]map[string]bool, error) {
	rows, err := db.QueryContext(ctx, `SELECT id, search, file FROM parse_commands`)
	if err != nil {
		return nil, fmt.Errorf("read the parser's database: %w", err)
	}
	defer rows.Close()
	out := map[string]map[string]bool{}
	for rows.Next() {
		var id, search, file string
		if err := rows.Scan(&id, &search, &file); err != nil {
			return nil, err
		}
		k := search + "/" + file
		if out[k] == nil {
			out[k] = map[string]bool{}
		}
		out[k][id] = true
	}
	return out, rows.Err()
}

// finishReport prints the report and turns a failed invariant into exit 1.
func finishReport(r *demoReport, o demoOptions, stdout io.Writer) error {
	if o.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(r); err != nil {
			return err
		}
	} else {
		printReport(stdout, r)
	}
	if !r.Pass {
		return &exitError{code: 1, err: fmt.Errorf("demo failed: %s", strings.Join(r.Violations, "; "))}
	}
	return nil
}

// newDemoWorker is the hidden worker process of the embedded demo.
func newDemoWorker() *cobra.Command {
	var path string
	var searches int
	cmd := &cobra.Command{
		Use:    "demo-worker",
		Short:  "A worker process of idem demo (internal)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
			defer stop()
			return runDemoWorker(ctx, path, searches)
		},
	}
	cmd.Flags().StringVar(&path, "db", "", "the demo's database")
	cmd.Flags().IntVar(&searches, "searches", 0, "the demo's number of searches")
	return cmd
}

func runDemoWorker(ctx context.Context, path string, searches int) error {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := sqlitestore.Open(ctx, path, &sqlitestore.Config{Lease: demoLease, SkipMigrate: true, Logger: logger})
	if err != nil {
		return err
	}
	defer st.Close()
	effects, err := openEffects(path + ".parser")
	if err != nil {
		return err
	}
	defer effects.Close()
	e, err := idem.NewEngine(st, st, &idem.Config{Logger: logger, BatchSize: 64, RetryBase: 20 * time.Millisecond, RetryMax: 500 * time.Millisecond, TimerInterval: 200 * time.Millisecond})
	if err != nil {
		return err
	}
	if err := e.Register(searchimport.New(searchimport.Config{}).Machine); err != nil {
		return err
	}
	p := &parser{effects: effects}
	if err := e.Handle(saga.MessageType(searchimport.StartParsingReferenceFile{}), p.handler(e, demoKinds(searches))); err != nil {
		return err
	}
	return e.Run(ctx)
}

var _ store.Store = (*sqlitestore.Store)(nil)

// publishAll publishes envs in chunks of 500.
func publishAll(ctx context.Context, e *idem.Engine, envs []idem.Envelope) error {
	for chunk := range slices.Chunk(envs, 500) {
		if err := e.Publish(ctx, chunk...); err != nil {
			return err
		}
	}
	return nil
}

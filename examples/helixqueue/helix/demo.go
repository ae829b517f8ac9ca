package helix

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/text/unicode/norm"
)

// DemoSubmissions are run-demo's submissions: two IDs in their NFC and NFD
// spellings, one ID submitted twice, and three more: nine submissions, six
// batches.
var DemoSubmissions = []string{
	"Sämple-Ω-001", norm.NFD.String("Sämple-Ω-001"),
	"Ünïcode-Çell-002", norm.NFD.String("Ünïcode-Çell-002"),
	"ASCII-003", "ASCII-003",
	"Probe-004", "Probe-005", "Probe-006",
}

// Summary is what run-demo prints: counts, the killed worker's batch with
// its audit trail, a twin's journal (raw_key: the spelling each message
// carried), and the metrics at the end. run-demo escapes every character
// beyond ASCII in it, so that the twins' spellings differ visibly.
type Summary struct {
	Submissions int                `json:"submissions"`
	Batches     int                `json:"batches"`
	Completed   int                `json:"completed"`
	AuditRows   int                `json:"audit_rows"`
	Killed      string             `json:"killed_worker"`
	KilledBatch string             `json:"killed_batch"`
	Reclaimed   []AuditRow         `json:"killed_batch_audit"`
	TwinJournal []map[string]any   `json:"twin_journal"`
	Metrics     map[string]float64 `json:"metrics"`
}

type demoWorker struct {
	app    *App
	cancel context.CancelFunc
	done   chan error
}

func cmdDemo(ctx context.Context, fs *flag.FlagSet, o *Options, args []string, out io.Writer) error {
	workers := fs.Int("workers", 3, "GPU workers (the first is killed mid-batch)")
	work := fs.Duration("work", 300*time.Millisecond, "simulated GPU time per batch")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *workers < 2 {
		return errors.New("run-demo: --workers must be at least 2")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	a, err := open(ctx, flag.NewFlagSet("", flag.ContinueOnError), o, nil)
	if err != nil {
		return err
	}
	defer shutdown(a)
	m := NewMetrics(a)
	batches := map[string]bool{}
	for _, raw := range DemoSubmissions {
		k, err := a.Submit(ctx, raw)
		if err != nil {
			return err
		}
		batches[k] = true
		printSubmitted(out, raw, k)
	}

	// Worker 1 hangs in its first batch and is killed there; the others work.
	began := make(chan string, 1)
	ws := make([]*demoWorker, *workers)
	for i := range ws {
		id := fmt.Sprintf("gpu-%d", i+1)
		var w Work
		if i == 0 {
			w = simulated(time.Hour, func(s string) { began <- s })
		} else {
			w = simulated(*work, nil)
		}
		if ws[i], err = startDemoWorker(ctx, *o, id, w, m); err != nil {
			return err
		}
	}
	defer func() {
		for _, w := range ws[1:] {
			w.stop()
		}
	}()
	var killed string
	select {
	case killed = <-began:
	case <-ctx.Done():
		return fmt.Errorf("run-demo: gpu-1 never started a batch: %w", ctx.Err())
	}
	ws[0].stop()
	fmt.Fprintf(out, "killed gpu-1 while it ran %q; its lease expires in %s\n", killed, o.Machine.Lease)

	for {
		res, err := a.DB.Results(ctx)
		if err != nil {
			return err
		}
		if len(res) == len(batches) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("run-demo: %d of %d batches completed: %w", len(res), len(batches), ctx.Err())
		case <-time.After(100 * time.Millisecond): // polling the outcome
		}
	}
	s, err := summarize(ctx, a, m, batches, killed)
	if err != nil {
		return err
	}
	return writeJSON(out, s, true)
}

// startDemoWorker runs a worker in a process of its own (its own App).
func startDemoWorker(ctx context.Context, o Options, id string, w Work, m *Metrics) (*demoWorker, error) {
	app, err := open(ctx, flag.NewFlagSet("", flag.ContinueOnError), &o, nil)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	d := &demoWorker{app: app, cancel: cancel, done: make(chan error, 1)}
	wk := &Worker{ID: id, App: app, Work: w, Metrics: m, Poll: 50 * time.Millisecond}
	go func() { d.done <- wk.Run(wctx) }()
	return d, nil
}

var stopMu sync.Mutex

// stop cancels the worker, waits for it, and stops its engine.
func (d *demoWorker) stop() {
	stopMu.Lock()
	defer stopMu.Unlock()
	if d.cancel == nil {
		return
	}
	d.cancel()
	<-d.done
	d.cancel = nil
	shutdown(d.app)
}

func summarize(ctx context.Context, a *App, m *Metrics, batches map[string]bool, killed string) (Summary, error) {
	s := Summary{Submissions: len(DemoSubmissions), Batches: len(batches), Killed: "gpu-1", KilledBatch: killed}
	res, err := a.DB.Results(ctx)
	if err != nil {
		return s, err
	}
	s.Completed = len(res)
	rows, err := a.DB.Audit(ctx, "")
	if err != nil {
		return s, err
	}
	s.AuditRows = len(rows)
	if s.Reclaimed, err = a.DB.Audit(ctx, killed); err != nil {
		return s, err
	}
	j, err := a.Journal(ctx, DemoSubmissions[1])
	if err != nil {
		return s, err
	}
	for _, e := range j {
		s.TwinJournal = append(s.TwinJournal, map[string]any{"event": e.EventType, "key": e.Key, "raw_key": rawSpelling(e), "to": e.ToState})
	}
	mfs, err := m.Registry.Gather()
	if err != nil {
		return s, fmt.Errorf("gather metrics: %w", err)
	}
	s.Metrics = map[string]float64{}
	for _, mf := range mfs {
		for _, x := range mf.GetMetric() {
			switch {
			case x.Counter != nil:
				s.Metrics[mf.GetName()] = x.Counter.GetValue()
			case x.Gauge != nil:
				s.Metrics[mf.GetName()] = x.Gauge.GetValue()
			}
		}
	}
	return s, nil
}

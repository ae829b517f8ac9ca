package helix

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const usage = `usage: helixqueue <command> --store <sqlite path | postgres URL> [flags]

commands:
  submit ID...   publish sequencing batches (one per canonical sample ID) for
                 the workers; --redis
  worker         run a GPU worker until interrupted; --redis, --id, --lease,
                 --work, --metrics
  audit          print the audit rows (--sample ID: one batch, with its
                 journal); reads the store only
  run-demo       submit batches with NFC/NFD twins and duplicates, run three
                 workers, kill one mid-batch, and print a summary; --redis

"helixqueue <command> --help" lists a command's flags.
`

// command is one subcommand: what it runs, and the flags that mean
// something to it beyond --store and --schema.
type command struct {
	run func(context.Context, *flag.FlagSet, *Options, []string, io.Writer) error
	// redis adds --redis and --namespace.
	redis bool
	// lease adds --lease with this default (0: no --lease): only the
	// commands whose engine consumes, and so applies assignments, use it.
	lease time.Duration
}

var commands = map[string]command{
	"submit":   {run: cmdSubmit, redis: true},
	"worker":   {run: cmdWorker, redis: true, lease: 30 * time.Second},
	"audit":    {run: cmdAudit},
	"run-demo": {run: cmdDemo, redis: true, lease: 2 * time.Second},
}

// Main runs the command line and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "helixqueue: unknown command %q\n%s", args[0], usage)
		return 2
	}
	fs := flag.NewFlagSet("helixqueue "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &Options{}
	fs.StringVar(&o.Store, "store", "", "SQLite path or postgres:// URL")
	fs.StringVar(&o.Schema, "schema", "helixqueue", "PostgreSQL schema")
	if cmd.redis {
		fs.StringVar(&o.Redis, "redis", "", "redis:// URL of the transport")
		fs.StringVar(&o.Namespace, "namespace", "", "Redis stream namespace (default: helixqueue- and a hash of --store and --schema)")
	}
	if cmd.lease > 0 {
		fs.DurationVar(&o.Machine.Lease, "lease", cmd.lease, "assignment lease before the reaper releases it")
	}
	if err := cmd.run(ctx, fs, o, args[1:], stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 2
		}
		// The package's own errors already name it.
		fmt.Fprintln(stderr, "helixqueue:", strings.TrimPrefix(err.Error(), "helixqueue: "))
		return 1
	}
	return 0
}

// open parses the flags and opens an App with its engine started.
func open(ctx context.Context, fs *flag.FlagSet, o *Options, args []string) (*App, error) {
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	a, err := Open(ctx, *o)
	if err != nil {
		return nil, err
	}
	if err := a.Engine.Start(ctx); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// shutdown stops a's engine and closes it.
func shutdown(a *App) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	_ = a.Engine.Stop(ctx)
	a.Close()
}

// cmdSubmit publishes the submissions and returns: its engine is never
// started, so it consumes nothing (the workers apply the submissions).
func cmdSubmit(ctx context.Context, fs *flag.FlagSet, o *Options, args []string, out io.Writer) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return errors.New("submit: give at least one sample ID")
	}
	for _, raw := range fs.Args() {
		if _, err := CanonicalID(raw); err != nil {
			return err // before anything is published
		}
	}
	a, err := Open(ctx, *o)
	if err != nil {
		return err
	}
	defer a.Close()
	for _, raw := range fs.Args() {
		k, err := a.Publish(ctx, raw)
		if err != nil {
			return err
		}
		printSubmitted(out, raw, k)
	}
	return nil
}

// printSubmitted prints a submission with its raw ID escaped beyond ASCII
// (%+q): the NFC and NFD twins of an ID, identical on a terminal, then
// differ ("S\u00e4mple" and "Sa\u0308mple").
func printSubmitted(out io.Writer, raw, batch string) {
	fmt.Fprintf(out, "submitted %+q → batch %+q\n", raw, batch)
}

func cmdWorker(ctx context.Context, fs *flag.FlagSet, o *Options, args []string, out io.Writer) error {
	id := fs.String("id", "gpu-1", "worker ID")
	work := fs.Duration("work", 2*time.Second, "simulated GPU time per batch")
	addr := fs.String("metrics", "", "serve /metrics on this address (e.g. 127.0.0.1:9464)")
	a, err := open(ctx, fs, o, args)
	if err != nil {
		return err
	}
	defer shutdown(a)
	m := NewMetrics(a)
	if *addr != "" {
		srv, err := serveMetrics(*addr, m)
		if err != nil {
			return err
		}
		defer srv.Close()
		fmt.Fprintf(out, "metrics on http://%s/metrics\n", *addr)
	}
	w := &Worker{ID: *id, App: a, Metrics: m, Work: simulated(*work, nil)}
	fmt.Fprintf(out, "worker %s running; Ctrl-C to stop\n", *id)
	return w.Run(ctx)
}

// serveMetrics serves m's registry at /metrics on addr.
func serveMetrics(addr string, m *Metrics) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return srv, nil
}

// simulated is a Work that takes d per batch; began, when set, is told of
// each batch before it starts.
func simulated(d time.Duration, began func(sample string)) Work {
	return func(ctx context.Context, sample string, attempt int) (string, error) {
		if began != nil {
			began(sample)
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-t.C:
			return fmt.Sprintf("reads of %s (attempt %d)", sample, attempt), nil
		}
	}
}

// cmdAudit prints the audit rows, and with --sample the batch's journal,
// as JSON lines with every non-ASCII character escaped, so that the
// spellings of twins differ visibly. It reads the store only: no transport,
// no engine.
func cmdAudit(ctx context.Context, fs *flag.FlagSet, o *Options, args []string, out io.Writer) error {
	sample := fs.String("sample", "", "one batch's sample ID (any spelling)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key := ""
	if *sample != "" {
		var err error
		if key, err = CanonicalID(*sample); err != nil {
			return err
		}
	}
	r, err := OpenRecords(ctx, *o)
	if err != nil {
		return err
	}
	defer r.Close()
	rows, err := r.DB.Audit(ctx, key)
	if err != nil {
		return err
	}
	for _, row := range rows {
		if err := writeJSON(out, row, false); err != nil {
			return err
		}
	}
	if key == "" {
		return nil
	}
	j, err := r.Journal(ctx, key)
	if err != nil {
		return err
	}
	if len(rows) == 0 && len(j) == 0 {
		return fmt.Errorf("audit: no batch %+q in this store (a submission waits in Redis until a worker applies it)", *sample)
	}
	for _, e := range j {
		line := map[string]any{"journal": e.EventType, "key": e.Key, "raw_key": rawSpelling(e), "from": e.FromState, "to": e.ToState}
		if err := writeJSON(out, line, false); err != nil {
			return err
		}
	}
	return nil
}

package helix

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const usage = `usage: helixqueue <command> --store <sqlite path | postgres URL> --redis <redis URL> [flags]

commands:
  submit ID...   submit sequencing batches (one per canonical sample ID)
  worker         run a GPU worker until interrupted (--id, --work, --metrics)
  audit          print the audit rows (--sample ID: one batch, with its journal)
  run-demo       submit batches with NFC/NFD twins and duplicates, run three
                 workers, kill one mid-batch, and print a summary
`

// Main runs the command line and returns the exit code.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	cmds := map[string]func(context.Context, *flag.FlagSet, *Options, []string, io.Writer) error{
		"submit": cmdSubmit, "worker": cmdWorker, "audit": cmdAudit, "run-demo": cmdDemo,
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "helixqueue: unknown command %q\n%s", args[0], usage)
		return 2
	}
	fs := flag.NewFlagSet("helixqueue "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &Options{}
	fs.StringVar(&o.Store, "store", "", "SQLite path or postgres:// URL")
	fs.StringVar(&o.Redis, "redis", "", "redis:// URL of the transport")
	fs.StringVar(&o.Schema, "schema", "helixqueue", "PostgreSQL schema")
	fs.StringVar(&o.Namespace, "namespace", "helixqueue", "Redis stream namespace")
	fs.DurationVar(&o.Machine.Lease, "lease", 30*time.Second, "assignment lease before the reaper releases it")
	if err := cmd(ctx, fs, o, args[1:], stdout); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 2
		}
		fmt.Fprintln(stderr, "helixqueue:", err)
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

func cmdSubmit(ctx context.Context, fs *flag.FlagSet, o *Options, args []string, out io.Writer) error {
	a, err := open(ctx, fs, o, args)
	if err != nil {
		return err
	}
	defer shutdown(a)
	if fs.NArg() == 0 {
		return errors.New("submit: give at least one sample ID")
	}
	for _, raw := range fs.Args() {
		k, err := a.Submit(ctx, raw)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "submitted %q as batch %q\n", raw, k)
	}
	return nil
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

func cmdAudit(ctx context.Context, fs *flag.FlagSet, o *Options, args []string, out io.Writer) error {
	sample := fs.String("sample", "", "one batch's sample ID (any spelling)")
	a, err := open(ctx, fs, o, args)
	if err != nil {
		return err
	}
	defer shutdown(a)
	key := ""
	if *sample != "" {
		if key, err = CanonicalID(*sample); err != nil {
			return err
		}
	}
	rows, err := a.DB.Audit(ctx, key)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			return err
		}
	}
	if key == "" {
		return nil
	}
	j, err := a.Journal(ctx, key)
	if err != nil {
		return err
	}
	for _, e := range j {
		if err := enc.Encode(map[string]any{"journal": e.EventType, "key": e.Key, "raw_key": e.RawKey, "from": e.FromState, "to": e.ToState}); err != nil {
			return err
		}
	}
	return nil
}

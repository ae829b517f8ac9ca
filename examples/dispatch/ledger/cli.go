package ledger

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/idemhq/idem"
)

// KeyEnv is the environment variable that holds the pseudonymisation key
// when no -key-file is given.
const KeyEnv = "DISPATCH_HMAC_KEY"

// RawEvent is a dispatch event as the dispatch desk reports it, with the raw
// patient id. It never leaves the writer: Pseudonymize replaces the id.
type RawEvent struct {
	PatientID string          `json:"patient_id"`
	Seq       int64           `json:"seq"`
	Kind      Kind            `json:"kind"`
	Payload   json.RawMessage `json:"payload,omitempty"`
}

// Pseudonymize returns the event with the patient's pseudonym instead of the
// raw id.
func (p *Pseudonymizer) Pseudonymize(r RawEvent) (Event, error) {
	pn, err := p.Pseudonym(r.PatientID)
	if err != nil {
		return Event{}, fmt.Errorf("event seq %d: %w", r.Seq, err)
	}
	ev := Event{Patient: pn, Seq: r.Seq, Kind: r.Kind, Payload: r.Payload}
	if err := ev.Check(); err != nil {
		return Event{}, fmt.Errorf("event seq %d: %w", r.Seq, err)
	}
	return ev, nil
}

const usage = `usage: dispatch <command> [flags]

commands:
  write     pseudonymise events (JSON lines) and write them through Idem to the ledger
  validate  check the ledger's replay safety; prints violations as JSON, exit 1 when any
  serve     run a writer with an HTTP intake (POST /events) and replayed state (GET /state)

Run "dispatch <command> -h" for its flags.
`

// Main runs the dispatch command line with args (without the program name)
// and returns the exit code: 0 for success, 1 when validate found
// violations, 2 for usage and operational errors.
func Main(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "write":
		err = cmdWrite(ctx, args[1:], stdin, stdout, stderr)
	case "validate":
		var ok bool
		ok, err = cmdValidate(ctx, args[1:], stdout, stderr)
		if err == nil && !ok {
			return 1
		}
	case "serve":
		err = cmdServe(ctx, args[1:], stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "dispatch: unknown command %q\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "dispatch %s: %v\n", args[0], err)
		return 2
	}
	return 0
}

type dbFlags struct {
	dsn, schema string
}

func (d *dbFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.dsn, "db", "dispatch.db", "SQLite file or postgres:// URL (shared with Idem's store)")
	fs.StringVar(&d.schema, "schema", "dispatch", "PostgreSQL schema of Idem's tables and the ledger")
}

func loadKey(file string) (*Pseudonymizer, error) {
	var key []byte
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read key: %w", err)
		}
		key = []byte(strings.TrimSpace(string(b)))
	} else {
		key = []byte(os.Getenv(KeyEnv))
	}
	if len(key) == 0 {
		return nil, fmt.Errorf("no pseudonymisation key: set %s or -key-file", KeyEnv)
	}
	return NewPseudonymizer(key)
}

func readEvents(r io.Reader, p *Pseudonymizer) ([]Event, error) {
	var evs []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		txt := strings.TrimSpace(sc.Text())
		if txt == "" || strings.HasPrefix(txt, "#") {
			continue
		}
		var raw RawEvent
		dec := json.NewDecoder(strings.NewReader(txt))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("events line %d: %w", line, err)
		}
		ev, err := p.Pseudonymize(raw)
		if err != nil {
			return nil, fmt.Errorf("events line %d: %w", line, err)
		}
		evs = append(evs, ev)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return evs, nil
}

// WriteSummary is what "dispatch write" prints when it is done.
type WriteSummary struct {
	Writer    string `json:"writer"`
	Naive     bool   `json:"naive,omitempty"`
	Events    int    `json:"events"`
	Written   int    `json:"written,omitempty"`
	Received  int64  `json:"received"`
	Applied   int64  `json:"applied"`
	Ignored   int64  `json:"ignored"`
	Dups      int64  `json:"duplicates"`
	Conflicts int64  `json:"conflicts"`
	Retries   int64  `json:"retries"`
	Dead      int64  `json:"dead_lettered"`
}

func cmdWrite(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("write", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var db dbFlags
	db.register(fs)
	keyFile := fs.String("key-file", "", "file holding the pseudonymisation key (default: $"+KeyEnv+")")
	events := fs.String("events", "-", "JSON-lines file of events {patient_id, seq, kind, payload}; - for stdin")
	name := fs.String("name", "", "writer name recorded in the ledger (default host-pid)")
	stall := fs.String("stall", "", "inject a stall MIN-MAX (e.g. 200ms-900ms) between load and commit (testing)")
	naive := fs.Bool("naive", false, "write like the incident's writer (wall-clock keys, no idempotency) into naive_ledger")
	waitStart := fs.Bool("wait-start", false, `when ready, print "ready" and wait for a line on stdin before publishing (testing)`)
	interval := fs.Duration("interval", 0, "publish the events one by one, this far apart, like a live stream (default: all at once)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up when the events are not settled within this time")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, err := loadKey(*keyFile)
	if err != nil {
		return err
	}
	var lo, hi time.Duration
	if *stall != "" {
		a, b, ok := strings.Cut(*stall, "-")
		if lo, err = time.ParseDuration(a); err == nil && ok {
			hi, err = time.ParseDuration(b)
		}
		if err != nil || !ok || hi < lo {
			return fmt.Errorf("-stall %q: want MIN-MAX, e.g. 200ms-900ms", *stall)
		}
	}
	if *name == "" {
		h, _ := os.Hostname()
		*name = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	var in io.Reader = stdin
	if *events != "-" {
		f, err := os.Open(*events)
		if err != nil {
			return err
		}
		defer f.Close()
		in = f
	} else if *waitStart {
		return errors.New("-wait-start needs -events FILE: stdin is the start signal")
	}
	evs, err := readEvents(in, p)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	ready := func() error {
		if !*waitStart {
			return nil
		}
		fmt.Fprintln(stdout, "ready")
		if _, err := bufio.NewReader(stdin).ReadString('\n'); err != nil {
			return fmt.Errorf("wait for start: %w", err)
		}
		return nil
	}
	sum := WriteSummary{Writer: *name, Naive: *naive, Events: len(evs)}
	if *naive {
		d, err := Open(ctx, db.dsn, db.schema)
		if err != nil {
			return err
		}
		defer d.Close()
		if err := d.Migrate(ctx, Naive); err != nil {
			return err
		}
		if err := ready(); err != nil {
			return err
		}
		for _, ev := range evs {
			var s time.Duration
			if hi > 0 {
				s = lo + rand.N(hi-lo+1)
			}
			ok, err := d.NaiveAppend(ctx, ev, *name, s, 150*time.Millisecond)
			if err != nil {
				return err
			}
			if ok {
				sum.Written++
			}
		}
		return json.NewEncoder(stdout).Encode(sum)
	}

	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	w, err := OpenWriter(ctx, WriterConfig{DSN: db.dsn, Schema: db.schema, Name: *name, StallMin: lo, StallMax: hi,
		Logger: logger, Engine: &idem.Config{Logger: logger, RetryBase: 20 * time.Millisecond, RetryMax: time.Second}})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		w.Close(context.Background())
		return err
	}
	err = ready()
	for i := 0; err == nil && i < len(evs); i++ {
		if *interval <= 0 {
			err = w.Publish(ctx, evs)
			break
		}
		if i > 0 {
			t := time.NewTimer(*interval)
			select {
			case <-ctx.Done():
				err = ctx.Err()
			case <-t.C:
			}
			t.Stop()
		}
		if err == nil {
			err = w.Publish(ctx, evs[i:i+1])
		}
	}
	if err == nil {
		err = w.Wait(ctx, evs)
	}
	stopCtx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	if cerr := w.Close(stopCtx); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	st := w.Engine().Stats()
	sum.Received, sum.Applied, sum.Ignored, sum.Dups, sum.Conflicts, sum.Retries, sum.Dead =
		st.Received, st.Applied, st.Ignored, st.Duplicates, st.Conflicts, st.Retries, st.DeadLettered
	return json.NewEncoder(stdout).Encode(sum)
}

func cmdValidate(ctx context.Context, args []string, stdout, stderr io.Writer) (bool, error) {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var db dbFlags
	db.register(fs)
	naive := fs.Bool("naive", false, "validate the naive writer's tables instead of the ledger")
	if err := fs.Parse(args); err != nil {
		return false, err
	}
	if !IsPostgres(db.dsn) {
		if _, err := os.Stat(db.dsn); err != nil {
			return false, fmt.Errorf("database: %w", err)
		}
	}
	d, err := Open(ctx, db.dsn, db.schema)
	if err != nil {
		return false, err
	}
	defer d.Close()
	t := Strict
	if *naive {
		t = Naive
	}
	rows, err := d.Rows(ctx, t)
	if err != nil {
		return false, err
	}
	notes, err := d.Notifications(ctx, t)
	if err != nil {
		return false, err
	}
	rep := Validate(rows, notes)
	out := struct {
		Table string `json:"table"`
		*Report
	}{t.Ledger, rep}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		return false, err
	}
	return rep.OK(), nil
}

func cmdServe(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var db dbFlags
	db.register(fs)
	keyFile := fs.String("key-file", "", "file holding the pseudonymisation key (default: $"+KeyEnv+")")
	addr := fs.String("addr", "127.0.0.1:8090", "HTTP listen address (loopback by default)")
	name := fs.String("name", "", "writer name recorded in the ledger (default host-pid)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	p, err := loadKey(*keyFile)
	if err != nil {
		return err
	}
	if *name == "" {
		h, _ := os.Hostname()
		*name = fmt.Sprintf("%s-%d", h, os.Getpid())
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	w, err := OpenWriter(ctx, WriterConfig{DSN: db.dsn, Schema: db.schema, Name: *name, Logger: logger,
		Engine: &idem.Config{Logger: logger}})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		w.Close(context.Background())
		return err
	}
	srv := &http.Server{Handler: Routes(w, p), ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		w.Close(context.Background())
		return err
	}
	logger.Info("dispatch serving", "addr", ln.Addr().String(), "writer", *name)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	stopCtx, stop := context.WithTimeout(context.Background(), 30*time.Second)
	defer stop()
	_ = srv.Shutdown(stopCtx)
	if cerr := w.Close(stopCtx); err == nil || errors.Is(err, http.ErrServerClosed) {
		err = cerr
	}
	return err
}

// Routes returns the HTTP intake of a writer: POST /events takes one RawEvent
// (pseudonymised before anything is stored) and answers 202 with the event's
// identity; GET /state?patient_id=… replays the ledger and returns the
// patient's current state.
func Routes(w *Writer, p *Pseudonymizer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /events", func(rw http.ResponseWriter, r *http.Request) {
		var raw RawEvent
		dec := json.NewDecoder(http.MaxBytesReader(rw, r.Body, 64<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&raw); err != nil {
			http.Error(rw, "bad event: "+err.Error(), http.StatusBadRequest)
			return
		}
		ev, err := p.Pseudonymize(raw)
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		if err := w.Publish(r.Context(), []Event{ev}); err != nil {
			http.Error(rw, "publish failed", http.StatusServiceUnavailable)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		rw.WriteHeader(http.StatusAccepted)
		json.NewEncoder(rw).Encode(map[string]any{"event_id": ev.ID(), "patient": ev.Patient, "seq": ev.Seq, "kind": ev.Kind})
	})
	mux.HandleFunc("GET /state", func(rw http.ResponseWriter, r *http.Request) {
		pn, err := p.Pseudonym(r.URL.Query().Get("patient_id"))
		if err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		rows, err := w.DB().Rows(r.Context(), Strict)
		if err != nil {
			http.Error(rw, "read ledger failed", http.StatusServiceUnavailable)
			return
		}
		st, ok := Replay(rows)[pn]
		if !ok {
			http.Error(rw, "no events for this patient", http.StatusNotFound)
			return
		}
		rw.Header().Set("Content-Type", "application/json")
		json.NewEncoder(rw).Encode(map[string]any{"patient": pn, "state": st})
	})
	return mux
}

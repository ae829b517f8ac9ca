package cli

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/searchimport"
	"github.com/idemhq/idem/internal/enginestats"
	"github.com/idemhq/idem/saga"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/memstore"
	"github.com/idemhq/idem/transport/memtransport"
)

type demoOptions struct {
	searches, files, replicas int
	seed                      uint64
	loseAcks                  float64
	timeout                   time.Duration
	json, progress            bool
	store, db                 string
	kills                     int
	serve                     bool
	// poll is how often the SQLite demo reads its progress (default
	// demoPoll); tests set it long, as a loaded machine makes it.
	poll time.Duration
	// web is what --serve serves with: the listening flags of idem serve.
	web serveOptions
}

func newDemo() *cobra.Command {
	o := demoOptions{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the search-import workload with duplicates and faults, and check exactly-once",
		Long: `Run the search-import saga of the reference material end to end.

By default (--store sqlite) it runs on the embedded store: a SQLite file in a
temporary directory (--db PATH keeps it), which is also the queue. Several
worker processes (--replicas) consume it; every message is published 2 or 3
times, some storage notifications are re-sent with a new ID, the parser
answers at least once, and bad input is mixed in. A worker is killed with
SIGKILL (--kills times, spread over the run: the i-th once i/(kills+1) of
the sagas are finished, and more at random moments on a long run) and
restarted; the run continues from what the database holds. The work is
published in kills+1 shares, each once the kills before it are delivered,
so that however fast the machine the run cannot finish before its kills.
Each kill needs work around it: a run of fewer than ` + "20×(kills+1)" + ` sagas is
refused before it starts (pass more --searches, or fewer --kills).

With --store memory, engine replicas share an in-memory store and a
transport that reorders deliveries and loses acknowledgements (--lose-acks).

The closing report is computed from the store (and from the parser's own
record of what it was asked to do): messages, duplicates injected,
duplicate effects (must be 0), lost messages (must be 0) and dead letters
by reason. The exit code is 1 if an invariant fails.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDemo(cmd.Context(), o, cmd.OutOrStdout(), cmd.ErrOrStderr())
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.searches, "searches", 2000, "number of search imports (sagas) to run")
	f.IntVar(&o.files, "files", 2, "reference files per search (one parse command each)")
	f.IntVar(&o.replicas, "replicas", 3, "engine replicas (worker processes with --store sqlite) sharing the store and the queue")
	f.StringVar(&o.store, "store", "sqlite", "sqlite or sqlite:///path/to/demo.db (durable, worker processes killed and restarted), or memory (in-process, lost acks and reordering)")
	f.StringVar(&o.db, "db", "", "with --store sqlite: the database file to use and keep (default: a temporary file, removed afterwards)")
	f.IntVar(&o.kills, "kills", 3, "with --store sqlite: at least this many SIGKILLs of a worker process")
	f.BoolVar(&o.serve, "serve", false, "with --store sqlite: afterwards, keep serving the demo's database over HTTP (idem serve) until interrupted")
	o.web.listenFlags(f, "with --serve: ")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the workload and fault schedule (goroutine scheduling still varies)")
	f.Float64Var(&o.loseAcks, "lose-acks", 0.02, "with --store memory: fraction of acknowledgements the transport silently loses (0..1)")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "give up (and fail) if the workload has not settled by then")
	f.BoolVar(&o.json, "json", false, "print the report as JSON")
	f.BoolVar(&o.progress, "progress", true, "show a progress bar on stderr")
	return cmd
}

// demoPoll is how often the SQLite demo reads its progress.
const demoPoll = 50 * time.Millisecond

// demoSagasPerKill is the least number of sagas per SIGKILL (and one
// more share for the end of the run) of the SQLite demo.
const demoSagasPerKill = 20

// parseStore reads --store: the words sqlite and memory, or a store URL as
// the other commands take it (sqlite:///path or sqlite:path, which is
// --db, and memory: for the in-memory store).
func (o *demoOptions) parseStore() error {
	switch scheme, rest, _ := strings.Cut(o.store, ":"); {
	case o.store == "sqlite" || o.store == "memory":
	case scheme == "memory" && strings.Trim(rest, "/") == "":
		o.store = "memory"
	case scheme == "sqlite" && strings.TrimPrefix(rest, "//") != "":
		path := strings.TrimPrefix(rest, "//")
		if o.db != "" && o.db != path {
			return fmt.Errorf("--store %s and --db %s name two files: give one", o.store, o.db)
		}
		o.store, o.db = "sqlite", path
	default:
		return fmt.Errorf("--store must be sqlite, memory or a URL like sqlite:///path/to/demo.db, got %q", o.store)
	}
	return nil
}

func (o demoOptions) validate() error {
	switch {
	case o.searches < 1:
		return fmt.Errorf("--searches must be at least 1, got %d", o.searches)
	case o.files < 1:
		return fmt.Errorf("--files must be at least 1, got %d", o.files)
	case o.replicas < 1:
		return fmt.Errorf("--replicas must be at least 1, got %d", o.replicas)
	case o.loseAcks < 0 || o.loseAcks >= 1:
		return fmt.Errorf("--lose-acks must be in [0, 1), got %v", o.loseAcks)
	case o.kills < 0:
		return fmt.Errorf("--kills must not be negative, got %d", o.kills)
	case o.store == "sqlite" && o.searches < demoSagasPerKill*(o.kills+1):
		return fmt.Errorf("--searches %d is too small for --kills %d: the kills are spread over the run and each needs work around it, %d sagas per kill: pass --searches %d or more, or fewer --kills",
			o.searches, o.kills, demoSagasPerKill, demoSagasPerKill*(o.kills+1))
	case o.serve && o.store != "sqlite":
		return fmt.Errorf("--serve needs --store sqlite: the in-memory demo keeps nothing to serve")
	}
	return nil
}

// searchKind is what the driver arranges for one search.
type searchKind int

const (
	kindNormal     searchKind = iota // parses every file → Completed
	kindFileFaults                   // the parser faults on the first file → Error
	kindNoMetadata                   // the storage notification has no files → Error
)

// demoReport is the closing report.
type demoReport struct {
	Store              string         `json:"store"`
	Transport          string         `json:"transport"`
	Replicas           int            `json:"replicas"`
	Seed               uint64         `json:"seed"`
	Searches           int            `json:"searches"`
	Published          int64          `json:"messages_published"`
	DuplicatesInjected int64          `json:"duplicates_injected"`
	Deliveries         int64          `json:"deliveries"`
	Redeliveries       int64          `json:"redeliveries"`
	AcksLost           int64          `json:"acks_lost"`
	Applied            int64          `json:"transitions_applied"`
	DuplicatesSkipped  int64          `json:"duplicates_skipped"`
	Ignored            int64          `json:"ignored"`
	Conflicts          int64          `json:"conflicts_retried"`
	Completed          int            `json:"completed"`
	Errored            int            `json:"error"`
	ParseCommands      int            `json:"parse_commands"`
	DuplicateEffects   int            `json:"duplicate_effects"`
	LostMessages       int            `json:"lost_messages"`
	DeadLetters        map[string]int `json:"dead_letters"`
	ExpectedDead       map[string]int `json:"dead_letters_expected"`
	Kills              int            `json:"worker_kills,omitempty"`
	Elapsed            string         `json:"elapsed"`
	Violations         []string       `json:"violations,omitempty"`
	Pass               bool           `json:"pass"`
}

// parser stands in for the service that parses reference files: it records
// every distinct parse command it receives (by ID) and answers at least
// once.
type parser struct {
	mu       sync.Mutex
	commands map[string]map[string]bool // search/file → command IDs, in memory
	effects  *sql.DB                    // or the parser's own database (--store sqlite)
}

// record notes that the parser was asked, by command id, to parse file of
// search.
func (p *parser) record(ctx context.Context, id, search, file string) error {
	if p.effects != nil {
		_, err := p.effects.ExecContext(ctx, `INSERT INTO parse_commands (id, search, file) VALUES (?, ?, ?)
ON CONFLICT (id) DO UPDATE SET runs = runs + 1`, id, search, file)
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	k := search + "/" + file
	if p.commands[k] == nil {
		p.commands[k] = map[string]bool{}
	}
	p.commands[k][id] = true
	return nil
}

func runDemo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) error {
	if err := o.parseStore(); err != nil {
		return usageErrorf("%v", err)
	}
	if err := o.validate(); err != nil {
		return err
	}
	if o.serve { // refused now, not after the run
		if _, err := o.web.checkListen(); err != nil {
			return err
		}
	}
	if o.store == "sqlite" {
		return runSQLiteDemo(ctx, o, stdout, stderr)
	}
	return runMemoryDemo(ctx, o, stdout, stderr)
}

// demoKinds decides, deterministically, what happens to each search.
func demoKinds(n int) []searchKind {
	kinds := make([]searchKind, n)
	for i := range kinds {
		switch {
		case i%50 == 49:
			kinds[i] = kindFileFaults
		case i%100 == 42:
			kinds[i] = kindNoMetadata
		}
	}
	return kinds
}

func runMemoryDemo(ctx context.Context, o demoOptions, stdout, stderr io.Writer) error {
	start := time.Now()
	rng := rand.New(rand.NewPCG(o.seed, 0x1de))
	kinds := demoKinds(o.searches)

	st := memstore.New(nil)
	defer st.Close()
	mt := memtransport.New(&memtransport.Config{Lease: time.Second, Reorder: true, LoseAckRate: o.loseAcks, Seed: int64(o.seed)})
	defer mt.Close()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	m := searchimport.New(searchimport.Config{})
	p := &parser{commands: map[string]map[string]bool{}}
	parseType := saga.MessageType(searchimport.StartParsingReferenceFile{})

	engines := make([]*idem.Engine, o.replicas)
	for i := range engines {
		e, err := idem.NewEngine(st, mt, &idem.Config{Logger: logger, BatchSize: 32, RetryBase: 10 * time.Millisecond, RetryMax: 200 * time.Millisecond})
		if err != nil {
			return err
		}
		if err := e.Register(m); err != nil {
			return err
		}
		if err := e.Handle(parseType, p.handler(e, kinds)); err != nil {
			return err
		}
		engines[i] = e
	}
	for _, e := range engines {
		if err := e.Start(ctx); err != nil {
			return err
		}
	}
	stopAll := func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		for _, e := range engines {
			_ = e.Stop(sctx)
		}
	}
	defer stopAll()

	e0 := engines[0]
	envs, injected, expectedDead := demoWorkload(o, rng, kinds, e0)

	bar := newProgress(o.progress && !o.json, stderr, stderr, o.searches)
	for chunk := range slices.Chunk(envs, 256) {
		if err := e0.Publish(ctx, chunk...); err != nil {
			return err
		}
	}

	// Wait until every saga is finished and the transport is drained.
	deadline := time.Now().Add(o.timeout)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		finished, err := countFinished(ctx, st)
		if err != nil {
			return err
		}
		if bar != nil {
			bar.Set(finished)
		}
		if finished == o.searches && mt.Unsettled() == 0 {
			break
		}
		if time.Now().After(deadline) {
			fmt.Fprintf(stderr, "\nidem demo: not settled after %s: %d/%d sagas finished, %d messages pending\n", o.timeout, finished, o.searches, mt.Unsettled())
			break
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
	stopAll()

	r, err := buildReport(ctx, o, st, p.commands, kinds, expectedDead)
	if err != nil {
		return err
	}
	ts := mt.Stats()
	r.Published, r.DuplicatesInjected = ts.Published, injected
	r.Deliveries, r.Redeliveries, r.AcksLost = ts.Delivered, ts.Redelivered, ts.AcksLost
	s := enginestats.Sum(engines...)
	r.Applied, r.DuplicatesSkipped, r.Ignored, r.Conflicts = s.Applied, s.Duplicates, s.Ignored, s.Conflicts
	r.Elapsed = time.Since(start).Round(time.Millisecond).String()
	err = finishReport(r, o, stdout)
	if !o.json {
		printNextSteps(stdout, "")
	}
	return err
}

// demoWorkload builds the messages: every message 2–3 times, some
// notifications re-sent with a new ID, bad input mixed in, all shuffled. It
// returns them with the number of injected copies and the dead letters the
// bad input must produce.
func demoWorkload(o demoOptions, rng *rand.Rand, kinds []searchKind, e0 *idem.Engine) ([]idem.Envelope, int64, map[string]int) {
	var envs []idem.Envelope
	var injected int64
	addCopies := func(env idem.Envelope) {
		n := 2 + rng.IntN(2)
		injected += int64(n - 1)
		for range n {
			envs = append(envs, env.Clone())
		}
	}
	for i, kind := range kinds {
		id := fmt.Sprintf("search-%05d", i)
		files := make([]string, o.files)
		for f := range files {
			files[f] = fmt.Sprintf("refs-%d.ris", f)
		}
		md := searchimport.Metadata{SearchID: id, ProjectID: fmt.Sprintf("project-%d", i%17), SearchName: "Search " + id, ReferenceFiles: files}
		if i%7 != 3 { // some uploads are only announced by storage
			env, _ := e0.NewEnvelope("api-"+id, searchimport.SearchUploadStarted{Metadata: md})
			addCopies(env)
		}
		saved := md
		if kind == kindNoMetadata {
			saved.ReferenceFiles = nil
		}
		env, _ := e0.NewEnvelope("s3-"+id, searchimport.SearchUploadSaved{Metadata: saved})
		addCopies(env)
		if i%10 == 5 { // storage notified again, and the publisher minted a new ID
			env, _ := e0.NewEnvelope("s3-"+id+"-renotified", searchimport.SearchUploadSaved{Metadata: saved})
			addCopies(env)
		}
	}
	expectedDead := map[string]int{}
	bad := func(reason string, env idem.Envelope) {
		expectedDead[reason]++
		addCopies(env)
	}
	savedType := saga.MessageType(searchimport.SearchUploadSaved{})
	for i := range 5 {
		bad(idem.ReasonMalformed, idem.Envelope{ID: fmt.Sprintf("bad-json-%d", i), Type: savedType, Body: []byte(`{"search_id": "search-`)})
		bad(idem.ReasonUnknownType, idem.Envelope{ID: fmt.Sprintf("bad-type-%d", i), Type: "searchimport.SearchUploadDeleted", Body: []byte(`{}`)})
		bad(idem.ReasonInvalidKey, idem.Envelope{ID: fmt.Sprintf("bad-key-%d", i), Type: savedType, Body: []byte(`{"search_id": "  "}`)})
	}
	bad(idem.ReasonInvalidKey, idem.Envelope{ID: "bad-key-control", Type: savedType, Body: []byte(`{"search_id": "search\u0000x"}`)})
	rng.Shuffle(len(envs), func(i, j int) { envs[i], envs[j] = envs[j], envs[i] })
	return envs, injected, expectedDead
}

func (p *parser) handler(e *idem.Engine, kinds []searchKind) idem.HandlerFunc {
	return func(ctx context.Context, env idem.Envelope) error {
		var cmd searchimport.StartParsingReferenceFile
		if err := json.Unmarshal(env.Body, &cmd); err != nil {
			return idem.Permanent(err)
		}
		if err := p.record(ctx, env.ID, cmd.SearchID, cmd.File); err != nil {
			return fmt.Errorf("parser: record command %s: %w", env.ID, err)
		}

		var i int
		fmt.Sscanf(cmd.SearchID, "search-%d", &i)
		var reply any = searchimport.ReferenceFileParsingCompleted(cmd)
		if i < len(kinds) && kinds[i] == kindFileFaults && strings.HasPrefix(cmd.File, "refs-0.") {
			reply = searchimport.ReferenceFileFaulted{SearchID: cmd.SearchID, File: cmd.File, Error: "unsupported encoding"}
		}
		out, err := e.NewEnvelope("parsed-"+env.ID, reply)
		if err != nil {
			return idem.Permanent(err)
		}
		// The parser answers at least once: sometimes twice.
		return e.Publish(ctx, out, out.Clone())
	}
}

func countFinished(ctx context.Context, st store.Store) (int, error) {
	n, after := 0, ""
	for {
		page, err := st.ListInstances(ctx, &store.ListParams{SagaType: searchimport.SagaType, After: after, Limit: 1000})
		if err != nil {
			return 0, err
		}
		for _, in := range page {
			if !in.FinishedAt.IsZero() {
				n++
			}
		}
		if len(page) < 1000 {
			return n, nil
		}
		after = page[len(page)-1].Key
	}
}

// buildReport checks the invariants from the store and from the parser's
// record of the commands it received (search/file → command IDs).
func buildReport(ctx context.Context, o demoOptions, st store.Store, commands map[string]map[string]bool, kinds []searchKind, expectedDead map[string]int) (*demoReport, error) {
	r := &demoReport{Store: "memory", Transport: "memory (reorder, lost acks)", Replicas: o.replicas, Seed: o.seed,
		Searches: o.searches, DeadLetters: map[string]int{}, ExpectedDead: expectedDead}
	violate := func(format string, args ...any) {
		if len(r.Violations) < 20 {
			r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
		}
	}
	byKey := map[string]*store.Instance{}
	after := ""
	for {
		page, err := st.ListInstances(ctx, &store.ListParams{SagaType: searchimport.SagaType, After: after, Limit: 1000})
		if err != nil {
			return nil, err
		}
		for _, in := range page {
			byKey[in.Key] = in
		}
		if len(page) < 1000 {
			break
		}
		after = page[len(page)-1].Key
	}
	savedType := saga.MessageType(searchimport.SearchUploadSaved{})
	for i, kind := range kinds {
		id := fmt.Sprintf("search-%05d", i)
		in := byKey[id]
		want := "Completed"
		if kind != kindNormal {
			want = "Error"
		}
		switch {
		case in == nil:
			r.LostMessages++
			violate("%s: no saga (its messages were lost)", id)
			continue
		case in.State != want:
			r.LostMessages++
			violate("%s: state %s, want %s", id, in.State, want)
		}
		switch in.State {
		case "Completed":
			r.Completed++
		case "Error":
			r.Errored++
		}
		// Exactly one applied SearchUploadSaved per saga, from the journal.
		journal, err := st.Journal(ctx, store.Key{SagaType: searchimport.SagaType, Key: id})
		if err != nil {
			return nil, err
		}
		saved := 0
		for _, j := range journal {
			if j.EventType == savedType {
				saved++
			}
		}
		if saved != 1 {
			r.DuplicateEffects++
			violate("%s: SearchUploadSaved applied %d times", id, saved)
		}
		if kind == kindNoMetadata {
			continue
		}
		for f := range o.files {
			k := fmt.Sprintf("%s/refs-%d.ris", id, f)
			switch n := len(commands[k]); {
			case n == 0:
				r.LostMessages++
				violate("%s: no parse command", k)
			case n > 1:
				r.DuplicateEffects += n - 1
				violate("%s: %d distinct parse commands", k, n)
			}
		}
	}
	for _, cmds := range commands {
		r.ParseCommands += len(cmds)
	}
	dls, err := st.ListDeadLetters(ctx, &store.ListParams{Limit: 1 << 20})
	if err != nil {
		return nil, err
	}
	for _, dl := range dls {
		r.DeadLetters[dl.Reason]++
	}
	for reason, n := range expectedDead {
		if r.DeadLetters[reason] != n {
			violate("dead letters %s: got %d, want %d", reason, r.DeadLetters[reason], n)
		}
	}
	for reason, n := range r.DeadLetters {
		if expectedDead[reason] == 0 {
			violate("unexpected dead letters %s: %d", reason, n)
		}
	}
	r.Pass = len(r.Violations) == 0
	return r, nil
}

func printReport(w io.Writer, r *demoReport) {
	fmt.Fprintf(w, "Idem demo: search import\n  store:     %s\n  transport: %s\n  replicas:  %d, seed %d\n\n", r.Store, r.Transport, r.Replicas, r.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	check := func(n int) string {
		if n == 0 {
			return "0  ok"
		}
		return fmt.Sprintf("%d  FAIL", n)
	}
	rows := [][2]string{
		{"sagas", fmt.Sprint(r.Searches)},
		{"messages published", fmt.Sprint(r.Published)},
		{"duplicates injected", fmt.Sprint(r.DuplicatesInjected)},
	}
	if strings.HasPrefix(r.Store, "sqlite") {
		rows = append(rows,
			[2]string{"worker processes killed (SIGKILL)", fmt.Sprint(r.Kills)},
			[2]string{"saga transitions (from the journal)", fmt.Sprint(r.Applied)},
		)
	} else {
		rows = append(rows,
			[2]string{"deliveries (with redeliveries)", fmt.Sprintf("%d (%d)", r.Deliveries, r.Redeliveries)},
			[2]string{"acks lost (injected)", fmt.Sprint(r.AcksLost)},
			[2]string{"transitions and handlers applied", fmt.Sprint(r.Applied)},
			[2]string{"duplicates skipped by the inbox", fmt.Sprint(r.DuplicatesSkipped)},
			[2]string{"events ignored by the machine", fmt.Sprint(r.Ignored)},
			[2]string{"conflicts retried", fmt.Sprint(r.Conflicts)},
		)
	}
	rows = append(rows,
		[2]string{"sagas completed / error", fmt.Sprintf("%d / %d", r.Completed, r.Errored)},
		[2]string{"parse commands (distinct IDs)", fmt.Sprint(r.ParseCommands)},
		[2]string{"duplicate effects", check(r.DuplicateEffects)},
		[2]string{"lost messages", check(r.LostMessages)},
		[2]string{"elapsed", r.Elapsed},
	)
	for _, row := range rows {
		fmt.Fprintf(tw, "  %s\t%s\n", row[0], row[1])
	}
	tw.Flush()
	reasons := make([]string, 0, len(r.DeadLetters))
	for k := range r.DeadLetters {
		reasons = append(reasons, k)
	}
	sort.Strings(reasons)
	fmt.Fprintln(w, "\n  dead letters by reason (got / expected):")
	for _, k := range reasons {
		fmt.Fprintf(w, "    %-20s %d / %d\n", k, r.DeadLetters[k], r.ExpectedDead[k])
	}
	if len(r.Violations) > 0 {
		fmt.Fprintln(w, "\n  violations:")
		for _, v := range r.Violations {
			fmt.Fprintln(w, "    -", v)
		}
	}
	result := "PASS: every message applied exactly once"
	if !r.Pass {
		result = "FAIL"
	}
	fmt.Fprintf(w, "\n%s\n", result)
}

// printNextSteps ends the demo's text report with what to look at next:
// the commands that read the database the run left at path, or, when it
// kept none (a temporary file, or the in-memory store), how to keep one.
// Each line runs as printed (its note is a shell comment).
func printNextSteps(w io.Writer, path string) {
	var head string
	var lines [][2]string
	if path == "" {
		head = "Next: this run kept nothing to look at (its store is gone). Keep a database:"
		lines = [][2]string{
			{"idem demo --db demo.db", "keep the database, then read it:"},
			{"idem sagas ls --store sqlite:demo.db --saga-type " + searchimport.SagaType + " --limit 10", "the sagas"},
			{"idem dlq groups --store sqlite:demo.db", "the dead letters, by failure"},
			{"idem demo --serve", "or open the console on the database when the run ends"},
		}
	} else {
		st := "sqlite://" + path
		if abs, err := filepath.Abs(path); err == nil {
			st = "sqlite://" + abs
		}
		st = hintWord(st)
		head = "Next: the database is kept at " + hintWord(path) + ". Look at what the run left:"
		lines = [][2]string{
			{"idem sagas ls --store " + st + " --saga-type " + searchimport.SagaType + " --limit 10", "the sagas"},
			{"idem sagas show --store " + st + " " + searchimport.SagaType + " KEY", "one saga, with its journal"},
			{"idem dlq groups --store " + st, "the dead letters, by failure"},
			{"idem dlq ls --store " + st + " --limit 10", "the dead letters, one by one"},
			{"idem serve --store " + st, "the console, at http://" + defaultServeAddr + "/"},
		}
	}
	fmt.Fprintf(w, "\n%s\n", head)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, l := range lines {
		fmt.Fprintf(tw, "  %s\t# %s\n", l[0], l[1])
	}
	_ = tw.Flush()
}

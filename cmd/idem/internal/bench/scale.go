package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/store"
)

// Scale is the size of the store an engine run starts on (Options.Sagas):
// Sagas live counter sagas "k-0" … "k-<Sagas-1>" holding InboxRows inbox
// records between them, and Finished sagas finished past retention that
// the engine's sweeper deletes during the measured phase. The measured
// workload's keys are drawn from the live sagas, so every Load probes the
// big tables. Preloaded rows carry message IDs starting with preloadPrefix;
// the exactly-once check leaves them out.
type Scale struct {
	Sagas     int `json:"sagas"`
	InboxRows int `json:"inbox_rows"`
	Finished  int `json:"finished,omitempty"`
	// PreloadSec is how long writing the rows (and VACUUM ANALYZE) took.
	PreloadSec float64 `json:"preload_sec"`
	// Ratio is the run's transitions/s over that of the same configuration
	// at the first --sagas value without the sweep.
	Ratio float64 `json:"ratio"`
	// Sweep is the sweeper's pass over the finished sagas, when Finished > 0.
	Sweep *SweepRun `json:"sweep,omitempty"`
}

// SweepRun is the engine's sweep (Engine.Sweep, what the background
// sweeper calls) started with the measured phase.
type SweepRun struct {
	Seconds   float64 `json:"seconds"`
	Instances int     `json:"instances"`
	Inbox     int     `json:"inbox"`
	// Overlap is the fraction of the measured phase the sweep ran in.
	Overlap float64 `json:"overlap"`
	Error   string  `json:"error,omitempty"`
}

// preloadPrefix starts the message IDs of preloaded inbox and journal rows;
// the workload's IDs start with "m-" or "l-".
const preloadPrefix = "pre-"

// scales lists the store sizes every configuration runs on, per --sagas
// value: the
// live sagas, then, with Options.Finished, the same with the finished
// sagas and the sweeper.
func (o *Options) scales() []*Scale {
	var out []*Scale
	for i, n := range o.Sagas {
		rows := 10 * n
		if len(o.InboxRows) > 0 {
			rows = o.InboxRows[i]
		}
		out = append(out, &Scale{Sagas: n, InboxRows: rows})
		if o.Finished > 0 {
			out = append(out, &Scale{Sagas: n, InboxRows: rows, Finished: o.Finished})
		}
	}
	return out
}

// validateScale reports a bad --sagas, --inbox-rows or --finished.
func (o *Options) validateScale() error {
	for _, n := range o.Sagas {
		if n < 1 {
			return fmt.Errorf("--sagas must be at least 1, got %d", n)
		}
	}
	for _, n := range o.InboxRows {
		if n < 0 {
			return fmt.Errorf("--inbox-rows must not be negative, got %d", n)
		}
	}
	switch {
	case len(o.InboxRows) > 0 && len(o.InboxRows) != len(o.Sagas):
		return fmt.Errorf("--inbox-rows needs one value per --sagas value (%d), got %d", len(o.Sagas), len(o.InboxRows))
	case o.Finished < 0:
		return fmt.Errorf("--finished must not be negative, got %d", o.Finished)
	case o.Finished > 0 && len(o.Sagas) == 0:
		return errors.New("--finished needs --sagas")
	}
	return nil
}

// scaled repeats configs once per store size of Options.Sagas (each run
// then owns a copy of its Scale), or returns them as they are.
func (o *Options) scaled(configs []EngineRun) []EngineRun {
	if len(o.Sagas) == 0 {
		return configs
	}
	var out []EngineRun
	for _, sc := range o.scales() {
		for _, c := range configs {
			c.Scale = sc
			out = append(out, c)
		}
	}
	return out
}

// workload gives run its own copy of its Scale and returns the measured
// stream for it: the --keys workload without a preload, else one over the
// preloaded sagas.
func (r *runner) workload(run *EngineRun) *Workload {
	if run.Scale == nil {
		return r.w
	}
	sc := *run.Scale
	run.Scale = &sc
	w := NewWorkload(r.o.Messages, sc.Sagas, r.o.Dup, r.o.Seed, "m-")
	w.preInbox = sc.InboxRows
	return w
}

// base is the counter preloaded key k starts at: the inbox records are
// dealt round robin over the keys, and each counted one.
func (w *Workload) base(k int) int {
	if w.preInbox == 0 {
		return 0
	}
	n := w.preInbox / w.Keys
	if k < w.preInbox%w.Keys {
		n++
	}
	return n
}

// preloaded is the exists-and-counts condition verify leaves out of its
// per-message tables: rows whose message ID is a preloaded one.
func preloaded(table string) string {
	switch table {
	case "idem_inbox":
		return ` WHERE message_id NOT LIKE '%' || chr(31) || '` + preloadPrefix + `%'`
	case "idem_journal":
		return ` WHERE message_id NOT LIKE '` + preloadPrefix + `%'`
	}
	return ""
}

// Preload statements. $1 saga type, $2 live sagas, $3 inbox rows, $4 now.
// They write what the engine writes for the counter saga (see uow.go in
// pgstore): an instance in state Open at version ≥ 1 with {"n": count},
// one inbox record per applied message, keyed by type and ID.
const (
	preloadInstancesSQL = `
INSERT INTO idem_instances (saga_type, key, state, data, schema_version, version, timers, created_at, updated_at, finished_at, attributes)
SELECT $1, 'k-' || i, 'Open', jsonb_build_object('n', c), 1, greatest(c, 1), 'null'::jsonb, $4::timestamptz - interval '1 day', $4::timestamptz - interval '1 hour', NULL, NULL
FROM (SELECT i, $3::bigint / $2 + CASE WHEN i < $3::bigint % $2 THEN 1 ELSE 0 END AS c FROM generate_series(0, $2::bigint - 1) AS i) s`
	preloadInboxSQL = `
INSERT INTO idem_inbox (saga_type, key, message_id, processed_at)
SELECT $1, 'k-' || (j % $2), $5 || chr(31) || '` + preloadPrefix + `' || j, $4::timestamptz - (j % 86400) * interval '1 second'
FROM generate_series(0, $3::bigint - 1) AS j`
	// Finished sagas: $2 of them, finished $3 ago, each with the inbox
	// record and journal row of the message that finished it.
	preloadFinishedSQL = `
INSERT INTO idem_instances (saga_type, key, state, data, schema_version, version, timers, created_at, updated_at, finished_at, attributes)
SELECT $1, 'done-' || i, 'Done', '{"n": 1}'::jsonb, 1, 1, 'null'::jsonb, $4::timestamptz - $3::interval, $4::timestamptz - $3::interval, $4::timestamptz - $3::interval, NULL
FROM generate_series(0, $2::bigint - 1) AS i`
	preloadFinishedInboxSQL = `
INSERT INTO idem_inbox (saga_type, key, message_id, processed_at)
SELECT $1, 'done-' || i, $5 || chr(31) || '` + preloadPrefix + `done-' || i, $4::timestamptz - $3::interval
FROM generate_series(0, $2::bigint - 1) AS i`
	preloadFinishedJournalSQL = `
INSERT INTO idem_journal (saga_type, key, raw_key, message_id, event_type, from_state, to_state, version, at)
SELECT $1, 'done-' || i, 'done-' || i, '` + preloadPrefix + `done-' || i, $5, 'Open', 'Done', 1, $4::timestamptz - $3::interval
FROM generate_series(0, $2::bigint - 1) AS i`
)

// finishedAge is how long ago the preloaded finished sagas finished: past
// the default Config.Retention (7 days).
const finishedAge = "30 days"

// preloadStep is one set-based INSERT of the preload.
type preloadStep struct {
	table, sql string
	args       []any
}

// preload writes sc's rows into the schema of st with set-based SQL, then
// VACUUM ANALYZE and CHECKPOINT, so that the measured phase starts on
// tables as autovacuum would leave them.
func (r *runner) preload(ctx context.Context, pool *pgxpool.Pool, sc *Scale) error {
	if sc == nil {
		return nil
	}
	start := time.Now()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	defer conn.Release()
	now := time.Now().UTC()
	steps := []preloadStep{
		{"idem_instances", preloadInstancesSQL, []any{SagaType, sc.Sagas, sc.InboxRows, now}},
		{"idem_inbox", preloadInboxSQL, []any{SagaType, sc.Sagas, sc.InboxRows, now, incrementType}},
	}
	if sc.Finished > 0 {
		fargs := []any{SagaType, sc.Finished, finishedAge, now, incrementType}
		steps = append(steps,
			preloadStep{"idem_instances", preloadFinishedSQL, fargs[:4]},
			preloadStep{"idem_inbox", preloadFinishedInboxSQL, fargs},
			preloadStep{"idem_journal", preloadFinishedJournalSQL, fargs})
	}
	if _, err := conn.Exec(ctx, `SET maintenance_work_mem = '512MB'`); err != nil {
		return fmt.Errorf("preload: %w", err)
	}
	for _, s := range steps {
		r.progress("preload: %s (%d sagas, %d inbox rows, %d finished)", s.table, sc.Sagas, sc.InboxRows, sc.Finished)
		if err := bulkInsert(ctx, conn.Conn(), s.table, s.sql, s.args...); err != nil {
			return fmt.Errorf("preload %s: %w", s.table, err)
		}
	}
	if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) idem_instances, idem_inbox, idem_journal`); err != nil {
		return fmt.Errorf("preload: vacuum: %w", err)
	}
	// A checkpoint left for the measured phase to pay would skew it; only
	// a superuser (or pg_checkpoint) may ask for one, so failing is fine.
	_, _ = conn.Exec(ctx, `CHECKPOINT`)
	sc.PreloadSec = time.Since(start).Seconds()
	r.progress("preload: done in %.0f s", sc.PreloadSec)
	return nil
}

// bulkInsert runs insert into table with its indexes dropped, then builds
// them again from their own definitions (pg_get_indexdef and
// pg_get_constraintdef), which is many times faster than maintaining them
// row by row at millions of rows. The table ends with the same indexes and
// constraints, freshly built (without the bloat of years of inserts).
func bulkInsert(ctx context.Context, conn *pgx.Conn, table, insert string, args ...any) error {
	rows, err := conn.Query(ctx, `
SELECT coalesce(c.conname, ''), CASE WHEN c.conname IS NULL THEN pg_get_indexdef(i.indexrelid) ELSE pg_get_constraintdef(c.oid) END, ic.relname
FROM pg_index i
JOIN pg_class ic ON ic.oid = i.indexrelid
LEFT JOIN pg_constraint c ON c.conindid = i.indexrelid AND c.conrelid = i.indrelid
WHERE i.indrelid = $1::regclass`, table)
	if err != nil {
		return err
	}
	type index struct{ constraint, def, name string }
	idx, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (index, error) {
		var x index
		return x, row.Scan(&x.constraint, &x.def, &x.name)
	})
	if err != nil {
		return err
	}
	tab := pgx.Identifier{table}.Sanitize()
	for _, x := range idx {
		drop := "DROP INDEX " + pgx.Identifier{x.name}.Sanitize()
		if x.constraint != "" {
			drop = "ALTER TABLE " + tab + " DROP CONSTRAINT " + pgx.Identifier{x.constraint}.Sanitize()
		}
		if _, err := conn.Exec(ctx, drop); err != nil {
			return err
		}
	}
	if _, err := conn.Exec(ctx, insert, args...); err != nil {
		return err
	}
	for _, x := range idx {
		build := x.def
		if x.constraint != "" {
			build = "ALTER TABLE " + tab + " ADD CONSTRAINT " + pgx.Identifier{x.constraint}.Sanitize() + " " + x.def
		}
		if _, err := conn.Exec(ctx, build); err != nil {
			return fmt.Errorf("rebuild %s: %w", x.name, err)
		}
	}
	return nil
}

// sweepInterval is the engine's Config.SweepInterval for run: a day when
// the run measures a sweep, so that the background sweeper (every minute
// by default) does not take batches from the measured Engine.Sweep, which
// ends at its first short batch; the default otherwise.
func sweepInterval(run *EngineRun) time.Duration {
	if run.Scale != nil && run.Scale.Finished > 0 {
		return 24 * time.Hour
	}
	return 0
}

// sweeper is the engine's sweep run beside the measured phase.
type sweeper struct {
	start time.Time
	done  chan struct{}
	res   store.SweepResult
	err   error
	end   time.Time
}

// startSweep starts Engine.Sweep when sc has finished sagas, else returns
// nil.
func startSweep(ctx context.Context, s *session, sc *Scale) *sweeper {
	if sc == nil || sc.Finished == 0 {
		return nil
	}
	sw := &sweeper{start: time.Now(), done: make(chan struct{})}
	go func() {
		defer close(sw.done)
		sw.res, sw.err = s.e.Sweep(ctx)
		sw.end = time.Now()
	}()
	return sw
}

// finish waits for the sweep and records it in sc: how long it took, what
// it deleted, and how much of the measured phase (start to drained) it
// overlapped.
func (sw *sweeper) finish(ctx context.Context, sc *Scale, drained time.Time) error {
	if sw == nil {
		return nil
	}
	select {
	case <-sw.done:
	case <-ctx.Done():
		return ctx.Err()
	}
	run := &SweepRun{Seconds: sw.end.Sub(sw.start).Seconds(), Instances: sw.res.Instances, Inbox: sw.res.Inbox}
	if phase := drained.Sub(sw.start).Seconds(); phase > 0 {
		run.Overlap = min(1, run.Seconds/phase)
	}
	if sw.err != nil {
		run.Error = sw.err.Error()
	}
	sc.Sweep = run
	return nil
}

// scaleRatios sets each preloaded run's Ratio against the run of the same
// configuration on the first scale without the sweep.
func scaleRatios(runs []EngineRun) {
	same := func(a, b *EngineRun) bool {
		return a.Transport == b.Transport && a.Traced == b.Traced && a.Dedup == b.Dedup &&
			a.Defaults == b.Defaults && a.Batch == b.Batch && a.Lanes == b.Lanes
	}
	for i := range runs {
		if runs[i].Scale == nil {
			continue
		}
		for j := range runs {
			if runs[j].Scale != nil && runs[j].Scale.Finished == 0 && same(&runs[i], &runs[j]) {
				runs[i].Scale.Ratio = ratio(runs[i].TransitionsPerSec, runs[j].TransitionsPerSec)
				break
			}
		}
	}
}

// resetPeakRSS resets the process's peak resident set size (Linux 4.0+:
// writing 5 to clear_refs), so that peakRSS measures one run.
func resetPeakRSS() { _ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) }

// peakRSS returns the process's peak resident set size in MiB (VmHWM),
// or 0 where /proc is not available.
func peakRSS() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}

// writeScale prints the preloaded runs: store size, rate, ratio to the
// first size, and the sweep.
func (rep *Report) writeScale(p *errWriter) {
	if len(rep.Runs) == 0 || rep.Runs[0].Scale == nil {
		return
	}
	p.printf("\nScale: the throughput phase on a preloaded store (ratio: to the same configuration at the first size without the sweep)\n\n")
	tw := tabwriter.NewWriter(p, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "transport\tconfig\tsagas\tinbox rows\tfinished\tpreload s\ttransitions/s\tratio\tpeak RSS MiB\tsweep s\tswept sagas\tsweep overlap\t")
	for _, r := range rep.Runs {
		sc := r.Scale
		sweep := "-\t-\t-"
		if sw := sc.Sweep; sw != nil {
			sweep = fmt.Sprintf("%.1f\t%d\t%.0f%%", sw.Seconds, sw.Instances, 100*sw.Overlap)
			if sw.Error != "" {
				sweep += " (" + sw.Error + ")"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.0f\t%.0f\t%.2f\t%.0f\t%s\t\n", transportName(r), configName(r),
			sc.Sagas, sc.InboxRows, sc.Finished, sc.PreloadSec, r.TransitionsPerSec, sc.Ratio, r.PeakRSSMiB, sweep)
	}
	_ = tw.Flush()
}

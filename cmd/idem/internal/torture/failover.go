package torture

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Failover kinds (Options.FailoverKinds): the failover fault rotates among
// them in this order.
const (
	// FailoverKill SIGKILLs the primary's postmaster; its Patroni agent
	// (primary_start_timeout 0) fails over to the synchronous standby, and
	// the old primary comes back as a replica (pg_rewind).
	FailoverKill = "kill"
	// FailoverSwitchover asks Patroni to switch over (what patronictl
	// switchover --force asks): the old primary is demoted and stays up as
	// a replica.
	FailoverSwitchover = "switchover"
	// FailoverFence fences the primary read-only in place (ALTER SYSTEM SET
	// default_transaction_read_only = on, reloaded) with its sessions open,
	// its Patroni agent killed (SIGKILL, as if it crashed) so that it
	// neither demotes nor restarts it: the leader key expires, the
	// synchronous standby is promoted, and writes on the old sessions fail
	// with SQLSTATE 25006. The driver keeps it so until a unit of work
	// commits on the new primary (at most failoverHold), then starts the
	// agent again as it ran, which demotes the old primary to a replica,
	// and un-fences it.
	FailoverFence = "fence"
)

// FailoverKinds are the failover kinds, in the order the fault rotates.
var FailoverKinds = []string{FailoverKill, FailoverSwitchover, FailoverFence}

// Failover is one failover the driver caused and how long the engine
// could not commit.
type Failover struct {
	Kind string
	// From and To name the old and the new primary (Patroni members);
	// OldPort and NewPort are their PostgreSQL ports.
	From, To         string
	OldPort, NewPort int
	// At is the fault: just before the SIGKILL, the switchover request or
	// the fence. Promoted is when the driver first saw another member
	// lead, polling Patroni every 50 ms (zero: never).
	At, Promoted time.Time
	// FirstCommit is the first unit of work committed on the new primary
	// at or after At (and before the next failover): the commit timestamp
	// (track_commit_timestamp) of the first journal insert the commit
	// audit recorded on NewPort, or the insert's clock_timestamp() when
	// commit timestamps are off. Zero: none.
	FirstCommit time.Time
	// Problem says what went wrong; empty if nothing did.
	Problem string
}

// Unavailable is the engine's unavailability in this failover: from the
// fault to the first commit on the new primary; false if nothing
// committed there.
func (f Failover) Unavailable() (time.Duration, bool) {
	if f.FirstCommit.IsZero() {
		return 0, false
	}
	return f.FirstCommit.Sub(f.At), true
}

// reconnect is the engine's own share: from the promotion the driver saw
// to the first commit on the new primary.
func (f Failover) reconnect() (time.Duration, bool) {
	if f.FirstCommit.IsZero() || f.Promoted.IsZero() {
		return 0, false
	}
	return f.FirstCommit.Sub(f.Promoted), true
}

const (
	// failoverPoll is how often a failover in progress polls Patroni and
	// the new primary.
	failoverPoll = 50 * time.Millisecond
	// failoverHold is how long a failover waits for a commit on the new
	// primary (the fence keeps the old primary fenced that long).
	failoverHold = 30 * time.Second
	// failoverGap separates the end of a failover (the cluster healthy
	// again) from the next.
	failoverGap = time.Second
)

// commitAudit is the table where a statement trigger on idem_journal
// records, in the committing transaction, the port of the server it ran
// on: the failover fault's measure of when the new primary first
// committed.
const commitAudit = "torture_commits"

// pgCommitAudit creates commitAudit; %[1]s is the run's schema.
const pgCommitAudit = `
CREATE TABLE %[1]s.` + commitAudit + ` (server int, at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION %[1]s.torture_record_commit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO %[1]s.` + commitAudit + ` (server) VALUES (inet_server_port());
  RETURN NULL;
END $$;
CREATE TRIGGER torture_record_commit AFTER INSERT ON %[1]s.idem_journal
FOR EACH STATEMENT EXECUTE FUNCTION %[1]s.torture_record_commit();`

// haFaults drives the failover fault.
type haFaults struct {
	p      *patroni
	store  string // the store's URL: its user, password and database
	schema string
	kinds  []string
	nodes  int // the cluster's members at the start
	logf   func(string, ...any)
	// cause causes one failover and follows it to its end: failover,
	// or a test's stand-in.
	cause func(ctx context.Context, kind string) Failover
}

// startFailovers readies the failover fault, if the run has it: the
// cluster must be healthy, and the commit audit is installed.
func (r *driver) startFailovers(ctx context.Context) error {
	o := &r.o
	if !o.has(FaultFailover) || o.Patroni == "" || !isPostgres(o.Store) {
		return nil
	}
	p, err := newPatroni(o.Patroni)
	if err != nil {
		return err
	}
	h := &haFaults{p: p, store: o.Store, schema: r.schema, kinds: o.FailoverKinds, logf: r.logf}
	if len(h.kinds) == 0 {
		h.kinds = FailoverKinds
	}
	h.cause = h.failover
	ms, err := h.waitHealthy(ctx, 0, time.Minute)
	if err != nil {
		return fmt.Errorf("--patroni %s: %w", o.Patroni, err)
	}
	h.nodes = len(ms)
	if _, err := r.db.ExecContext(ctx, fmt.Sprintf(pgCommitAudit, pgx.Identifier{r.schema}.Sanitize())); err != nil {
		return fmt.Errorf("install the commit audit: %w", err)
	}
	r.ha = h
	return nil
}

// waitHealthy polls the cluster until it is healthy (want members, 0:
// as many as it has APIs) or d passed.
func (h *haFaults) waitHealthy(ctx context.Context, want int, d time.Duration) ([]member, error) {
	if want == 0 {
		want = len(h.p.apis)
	}
	deadline := time.Now().Add(d)
	var ms []member
	var err error
	for {
		ms, err = h.p.cluster(ctx, "")
		if err == nil && healthy(ms, want) {
			return ms, nil
		}
		if time.Now().After(deadline) {
			if err == nil {
				err = fmt.Errorf("not healthy after %s (want %d running members, a leader and a synchronous standby): %s", d, want, describeMembers(ms))
			}
			return ms, err
		}
		if err := pause(ctx, failoverPoll); err != nil {
			return ms, err
		}
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d): // polling a condition with a deadline
		return nil
	}
}

func describeMembers(ms []member) string {
	var s []string
	for _, m := range ms {
		s = append(s, fmt.Sprintf("%s %s %s", m.Name, m.Role, m.State))
	}
	return strings.Join(s, ", ")
}

// failover causes one failover of kind and follows it to its end: a new
// primary, a commit on it (or failoverHold), the old primary back as a
// replica and the cluster healthy again.
func (h *haFaults) failover(ctx context.Context, kind string) (fo Failover) {
	fo.Kind = kind
	fail := func(format string, args ...any) Failover {
		fo.Problem = fmt.Sprintf(format, args...)
		return fo
	}
	ms, err := h.p.cluster(ctx, "")
	if err != nil {
		return fail("before the fault: %v", err)
	}
	old, ok := leaderOf(ms)
	if !ok {
		return fail("before the fault: no running leader (%s)", describeMembers(ms))
	}
	fo.From, fo.OldPort = old.Name, old.Port
	h.logf("failover %s: primary %s (port %d)", kind, old.Name, old.Port)
	var avoid string
	var switched chan error
	unfenced := false        // the fence's failover un-fenced the old primary
	var restart func() error // the fence's: starts the old primary's agent again
	switch kind {
	case FailoverKill:
		pid, err := listenerPID(old.Port)
		if err != nil {
			return fail("find the postmaster of %s: %v", old.Name, err)
		}
		fo.At = time.Now()
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			return fail("SIGKILL the postmaster %d of %s: %v", pid, old.Name, err)
		}
	case FailoverSwitchover:
		fo.At = time.Now()
		switched = make(chan error, 1)
		go func() { switched <- h.p.switchover(ctx, old) }()
	case FailoverFence:
		var err error
		if restart, err = h.fence(ctx, old, &fo); err != nil {
			return fail("fence %s: %v", old.Name, err)
		}
		// The agent restarted and the old primary un-fenced whatever
		// happens: without its agent it never rejoins, and a fenced
		// primary that leads again refuses every write.
		defer func() {
			if err := restart(); err != nil {
				h.logf("failover %s: restart the Patroni agent of %s: %v", kind, old.Name, err)
			}
			if !unfenced {
				if err := h.unfence(context.WithoutCancel(ctx), old); err != nil {
					h.logf("failover %s: un-fence %s: %v", kind, old.Name, err)
				}
			}
		}()
		avoid = old.api()
	}
	next, err := h.waitLeader(ctx, old, avoid)
	if err != nil {
		return fail("%v", err)
	}
	fo.Promoted, fo.To, fo.NewPort = time.Now(), next.Name, next.Port
	if switched != nil {
		if err := <-switched; err != nil {
			h.logf("failover %s: %v (a new leader was elected all the same)", kind, err)
		}
	}
	h.logf("failover %s: %s promoted %s after the fault", kind, next.Name, fo.Promoted.Sub(fo.At).Round(time.Millisecond))
	if seen, err := h.waitCommit(ctx, next, fo.At); !seen {
		fo.Problem = fmt.Sprintf("nothing committed on the new primary %s within %s of its promotion", next.Name, failoverHold)
		if kind == FailoverFence {
			fo.Problem += " while the old primary stayed fenced read-only with its sessions open (writes there fail with SQLSTATE 25006): the engine stayed on the old primary"
		}
		if err != nil {
			fo.Problem += fmt.Sprintf(" (last poll: %v)", err)
		}
	}
	if kind == FailoverFence {
		if err := restart(); err != nil {
			return fail("restart the Patroni agent of %s: %v", old.Name, err)
		}
		if err := h.unfence(ctx, old); err != nil {
			return fail("un-fence %s: %v", old.Name, err)
		}
		unfenced = true
	}
	if _, err := h.waitHealthy(ctx, h.nodes, 2*time.Minute); err != nil {
		return fail("after the failover: %v", err)
	}
	h.logf("failover %s: cluster healthy again %s after the fault", kind, time.Since(fo.At).Round(time.Millisecond))
	return fo
}

// fence kills old's Patroni agent (SIGKILL, as if it crashed: its
// PostgreSQL, which it started detached, runs on) and fences old
// read-only in place; the returned restart starts the agent again, as it
// ran (it then demotes old to a replica). A frozen agent (SIGSTOP) is no
// stand-in: Patroni 3.0.2 woken with its view of the cluster from before
// the freeze rewrites the leader key over the new leader's (etcd3's
// _update_leader puts it unconditionally), which demotes the new primary
// and loses what it committed.
func (h *haFaults) fence(ctx context.Context, old member, fo *Failover) (func() error, error) {
	apiPort, err := portOf(old.api())
	if err != nil {
		return nil, err
	}
	pid, err := listenerPID(apiPort)
	if err != nil {
		return nil, fmt.Errorf("find the Patroni agent of %s: %w", old.Name, err)
	}
	agent, err := readProc(pid)
	if err != nil {
		return nil, err
	}
	if !strings.Contains(strings.Join(agent.args, " "), "patroni") {
		return nil, fmt.Errorf("the process %d listening on %s is not a Patroni agent (%q)", pid, old.api(), agent.args)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return nil, fmt.Errorf("kill the Patroni agent %d: %w", pid, err)
	}
	started := false
	restart := func() error {
		if started {
			return nil
		}
		started = true
		return agent.start()
	}
	fo.At = time.Now()
	if err := h.exec(ctx, old, `ALTER SYSTEM SET default_transaction_read_only = on`, `SELECT pg_reload_conf()`); err != nil {
		if rerr := restart(); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, err
	}
	return restart, nil
}

// unfence waits until old's server runs in recovery (its restarted agent
// demoted it: un-fenced before, it would be a second primary) or leads
// the cluster again (a fenced leader refuses every write), and resets its
// fence.
func (h *haFaults) unfence(ctx context.Context, old member) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if standby, _ := h.query(ctx, old, `SELECT pg_is_in_recovery()`); standby {
			break
		}
		if ms, err := h.p.cluster(ctx, ""); err == nil {
			if l, ok := leaderOf(ms); ok && l.Name == old.Name {
				break
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not back as a replica after 2m", old.Name)
		}
		if err := pause(ctx, failoverPoll); err != nil {
			return err
		}
	}
	return h.exec(ctx, old, `ALTER SYSTEM RESET default_transaction_read_only`, `SELECT pg_reload_conf()`)
}

// waitLeader polls Patroni until a member other than old leads.
func (h *haFaults) waitLeader(ctx context.Context, old member, avoid string) (member, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		ms, err := h.p.cluster(ctx, avoid)
		if err == nil {
			if l, ok := leaderOf(ms); ok && l.Name != old.Name {
				return l, nil
			}
		}
		if time.Now().After(deadline) {
			return member{}, fmt.Errorf("no new leader 1m after the fault: %s (%v)", describeMembers(ms), err)
		}
		if err := pause(ctx, failoverPoll); err != nil {
			return member{}, err
		}
	}
}

// waitCommit polls the new primary's commit audit until a unit of work
// committed there at or after at, for at most failoverHold.
func (h *haFaults) waitCommit(ctx context.Context, next member, at time.Time) (bool, error) {
	deadline := time.Now().Add(failoverHold)
	q := fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s.%s WHERE server = $1 AND at >= $2)`, pgx.Identifier{h.schema}.Sanitize(), commitAudit)
	var lastErr error
	for time.Now().Before(deadline) {
		seen, err := h.query(ctx, next, q, next.Port, at)
		if seen {
			return true, nil
		}
		lastErr = err
		if err := pause(ctx, failoverPoll); err != nil {
			return false, err
		}
	}
	return false, lastErr
}

// memberConfig is the store URL's connection to m alone, with no check of
// its role (the fence and the audit poll talk to one node).
func (h *haFaults) memberConfig(m member) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(h.store)
	if err != nil {
		return nil, fmt.Errorf("parse the store URL: %w", err)
	}
	cfg.Host, cfg.Port, cfg.Fallbacks, cfg.ValidateConnect = m.Host, uint16(m.Port), nil, nil
	cfg.ConnectTimeout = 2 * time.Second
	return cfg, nil
}

// exec runs stmts on m, each on its own (ALTER SYSTEM cannot run in a
// transaction block).
func (h *haFaults) exec(ctx context.Context, m member, stmts ...string) error {
	cfg, err := h.memberConfig(m)
	if err != nil {
		return err
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", m.Name, err)
	}
	defer c.Close(context.WithoutCancel(ctx))
	for _, s := range stmts {
		if _, err := c.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s on %s: %w", s, m.Name, err)
		}
	}
	return nil
}

// query reads one boolean on m.
func (h *haFaults) query(ctx context.Context, m member, q string, args ...any) (bool, error) {
	cfg, err := h.memberConfig(m)
	if err != nil {
		return false, err
	}
	c, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer c.Close(context.WithoutCancel(ctx))
	var b bool
	err = c.QueryRow(ctx, q, args...).Scan(&b)
	return b, err
}

// portOf is the port of a http://host:port URL.
func portOf(api string) (int, error) {
	i := strings.LastIndexByte(api, ':')
	var port int
	if i < 0 {
		return 0, fmt.Errorf("no port in %q", api)
	}
	if _, err := fmt.Sscanf(api[i+1:], "%d", &port); err != nil {
		return 0, fmt.Errorf("no port in %q: %w", api, err)
	}
	return port, nil
}

// measureFailovers sets each failover's FirstCommit from the commit audit,
// read through db once the run settled: the first commit on the new
// primary from the fault until the next failover's fault.
func measureFailovers(ctx context.Context, db *sql.DB, schema string, fos []Failover) error {
	var track string
	if err := db.QueryRowContext(ctx, `SELECT current_setting('track_commit_timestamp')`).Scan(&track); err != nil {
		return fmt.Errorf("read track_commit_timestamp: %w", err)
	}
	t := "at"
	if track == "on" {
		t = "coalesce(pg_xact_commit_timestamp(xmin), at)"
	}
	q := fmt.Sprintf(`SELECT min(t) FROM (SELECT %s AS t FROM %s.%s WHERE server = $1) c WHERE t >= $2 AND t < $3`, t, pgx.Identifier{schema}.Sanitize(), commitAudit)
	for i := range fos {
		fo := &fos[i]
		if fo.To == "" {
			continue
		}
		until := time.Now().Add(24 * time.Hour)
		if i+1 < len(fos) && !fos[i+1].At.IsZero() {
			until = fos[i+1].At
		}
		var first sql.NullTime
		if err := db.QueryRowContext(ctx, q, fo.NewPort, fo.At, until).Scan(&first); err != nil {
			return fmt.Errorf("read the commit audit: %w", err)
		}
		fo.FirstCommit = first.Time
	}
	return nil
}

// FailoverSummary sums up the failovers of a failover run.
type FailoverSummary struct {
	Failovers []Failover
	// Start is the run's start, for the failovers' times.
	Start time.Time
}

// failoverReport measures the failovers and adds their problems: a run
// with the failover fault fails if no failover happened, or if one left
// nothing committed on the new primary.
func (r *driver) failoverReport(ctx context.Context) error {
	if r.ha == nil {
		return nil
	}
	if err := measureFailovers(ctx, r.db, r.schema, r.failovers); err != nil {
		return err
	}
	r.rep.Failover = &FailoverSummary{Failovers: r.failovers, Start: r.start}
	r.rep.Problems = append(r.rep.Problems, r.rep.Failover.problems()...)
	return nil
}

// problems are the summary's failures.
func (s *FailoverSummary) problems() []string {
	var out []string
	done := 0
	for i, f := range s.Failovers {
		switch {
		case f.Problem != "":
			out = append(out, fmt.Sprintf("failover %d (%s of %s): %s", i+1, f.Kind, f.From, f.Problem))
		case f.FirstCommit.IsZero():
			out = append(out, fmt.Sprintf("failover %d (%s of %s): nothing committed on the new primary %s before the next failover or the end of the run", i+1, f.Kind, f.From, f.To))
		}
		if f.To != "" {
			done++
		}
	}
	if done == 0 {
		out = append(out, "no failover happened: run longer (--duration), so that the cluster fails over at least once")
	}
	return out
}

// DurationStats are the minimum, median and maximum of some durations
// (the median of an even count is the mean of the middle two).
type DurationStats struct {
	N                int
	Min, Median, Max time.Duration
}

func statsOf(ds []time.Duration) DurationStats {
	if len(ds) == 0 {
		return DurationStats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return DurationStats{N: n, Min: s[0], Median: med, Max: s[n-1]}
}

func (d DurationStats) String() string {
	if d.N == 0 {
		return "none"
	}
	r := func(x time.Duration) time.Duration { return x.Round(time.Millisecond) }
	return fmt.Sprintf("min %s, median %s, max %s (%d)", r(d.Min), r(d.Median), r(d.Max), d.N)
}

// Unavailability returns the statistics of the unavailability of the
// failovers of kind ("" for all) that reached a commit on the new
// primary, and of its share after the promotion (the engine's reconnect).
func (s *FailoverSummary) Unavailability(kind string) (fault, promotion DurationStats) {
	var a, b []time.Duration
	for _, f := range s.Failovers {
		if kind != "" && f.Kind != kind {
			continue
		}
		if d, ok := f.Unavailable(); ok {
			a = append(a, d)
		}
		if d, ok := f.reconnect(); ok {
			b = append(b, d)
		}
	}
	return statsOf(a), statsOf(b)
}

// Print writes the summary for people.
func (s *FailoverSummary) Print(w io.Writer) {
	fmt.Fprintf(w, "  failovers: %d; unavailability = from the fault to the first commit on the new primary (after the promotion: the engine's own share)\n", len(s.Failovers))
	for _, k := range append(slices.Clone(FailoverKinds), "") {
		a, b := s.Unavailability(k)
		if a.N == 0 && k != "" {
			continue
		}
		name := k
		if k == "" {
			name = "all"
		}
		fmt.Fprintf(w, "    %-11s %s; after the promotion %s\n", name, a, b)
	}
	for i, f := range s.Failovers {
		line := fmt.Sprintf("    #%d %-10s at %s: %s → %s", i+1, f.Kind, f.At.Sub(s.Start).Round(time.Millisecond), f.From, orNone(f.To))
		if !f.Promoted.IsZero() {
			line += fmt.Sprintf(", promoted +%s", f.Promoted.Sub(f.At).Round(time.Millisecond))
		}
		if d, ok := f.Unavailable(); ok {
			line += fmt.Sprintf(", first commit +%s", d.Round(time.Millisecond))
		}
		if f.Problem != "" {
			line += ": " + f.Problem
		}
		fmt.Fprintln(w, line)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// ErrNoFailover is the error of a run asked for the failover fault with
// no cluster to fail over: without Options.Patroni the fault is left out
// of the mix, as pg-restart is without its command; the CLI refuses
// --faults failover without --patroni with it.
var ErrNoFailover = errors.New("--faults failover needs --patroni (the cluster's Patroni REST APIs, as scripts/pg-ha.sh exports them in IDEM_TEST_PG_HA_PATRONI) and a postgres:// --store on that cluster")

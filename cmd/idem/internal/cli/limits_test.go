package cli

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

// limitsBundle is a store with limits and a way to run idem on it.
type limitsBundle struct {
	t   *testing.T
	l   store.Limiter
	run func(args ...string) (int, string, string)
}

// setupLimitsSQLite migrates a SQLite store for the limits commands.
func setupLimitsSQLite(t *testing.T) *limitsBundle {
	t.Helper()
	path := filepath.Join(t.TempDir(), "idem.db")
	st, err := sqlitestore.Open(context.Background(), path, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return &limitsBundle{t: t, l: st, run: func(args ...string) (int, string, string) {
		t.Helper()
		return run(t, append(args, "--store", "sqlite://"+path)...)
	}}
}

// ls runs idem limits ls --json and returns the limits by name.
func (b *limitsBundle) ls() map[string]limitView {
	b.t.Helper()
	code, out, errOut := b.run("limits", "ls", "--json")
	if code != 0 {
		b.t.Fatalf("limits ls --json: exit %d, stderr %s", code, errOut)
	}
	var list limitList
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		b.t.Fatalf("limits ls --json: %v in\n%s", err, out)
	}
	m := map[string]limitView{}
	for _, v := range list.Limits {
		m[v.Name] = v
	}
	return m
}

// overrides returns the store's overrides without their times.
func (b *limitsBundle) overrides() []store.Limit {
	b.t.Helper()
	ls, err := b.l.Limits(context.Background())
	if err != nil {
		b.t.Fatal(err)
	}
	for i := range ls {
		ls[i].UpdatedAt = time.Time{}
	}
	return ls
}

func TestLimitsRoundTripOnSQLite(t *testing.T) {
	t.Parallel()
	testLimitsRoundTrip(t, setupLimitsSQLite(t))
}

func TestLimitsRoundTripOnPostgres(t *testing.T) {
	t.Parallel()
	pg := setupPG(t)
	testLimitsRoundTrip(t, &limitsBundle{t: t, l: pg.open(), run: pg.run})
}

// testLimitsRoundTrip declares limits as an engine does, holds slots,
// then sets, lists and resets an override with the CLI, checking what the
// store keeps and what the CLI prints at each step.
func testLimitsRoundTrip(t *testing.T, b *limitsBundle) {
	ctx := context.Background()
	parser := store.Limit{Name: "parser-api", Concurrency: 5, Rate: 20, Burst: 10}
	if err := b.l.DeclareLimits(ctx, []store.Limit{parser, {Name: "db", Concurrency: 2}}); err != nil {
		t.Fatal(err)
	}
	in := map[string]store.Limit{"parser-api": parser}
	reqs := []store.AdmitRequest{
		{Holder: "m1", Keys: []store.LimitKey{{Name: "parser-api", Key: "tenant-a"}}},
		{Holder: "m2", Keys: []store.LimitKey{{Name: "parser-api", Key: "tenant-a"}}},
		{Holder: "m3", Keys: []store.LimitKey{{Name: "parser-api", Key: "tenant-b"}}},
	}
	if _, err := b.l.Admit(ctx, &store.AdmitParams{Limits: in, Requests: reqs, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	waitOnDB(t, b.l.(store.AdmittingQueue))

	code, out, errOut := b.run("limits", "ls")
	wantExit(t, code, out, errOut, 0)
	for _, want := range []string{"NAME", "parser-api  cap 5, 20/s burst 10  cap 5, 20/s burst 10  -", "db", "cap 2", "LIMIT", "tenant-a", "tenant-b", "WAITING"} {
		if !strings.Contains(out, want) {
			t.Errorf("limits ls lacks %q:\n%s", want, out)
		}
	}
	v := b.ls()["parser-api"]
	if v.InForce == nil || v.InForce.Concurrency != 5 || v.Override != nil || !v.Applies || len(v.Counters) != 2 ||
		v.Counters[0].Key != "tenant-a" || v.Counters[0].InFlight != 2 || v.Counters[1].InFlight != 1 {
		t.Errorf("limits ls --json, parser-api before set: got %+v, want in force cap 5, no override, tenant-a 2 and tenant-b 1 in flight", v)
	}
	if v := b.ls()["db"]; len(v.Counters) != 1 || v.Counters[0].InFlight != 2 || v.Counters[0].Waiting != 1 {
		t.Errorf("limits ls --json, db: got %+v, want one counter with 2 in flight and 1 waiting", v)
	}

	code, out, errOut = b.run("limits", "set", "parser-api", "--concurrency", "8")
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "in force: cap 8, 20/s burst 10 (declared: cap 5, 20/s burst 10)") || !strings.Contains(out, "Config.LimitsInterval (1s by default)") {
		t.Errorf("limits set: got %q, want what is in force and when replicas pick it up", out)
	}
	if got := b.overrides(); len(got) != 1 || got[0] != (store.Limit{Name: "parser-api", Concurrency: 8, Rate: 20, Burst: 10}) {
		t.Errorf("overrides after set --concurrency 8: got %+v, want parser-api cap 8 with the declared rate and burst", got)
	}
	// The override is replaced whole: a flag not given is the declared value.
	if code, out, errOut = b.run("limits", "set", "parser-api", "--rate", "2.5"); code != 0 {
		t.Fatalf("limits set --rate 2.5: exit %d, %s%s", code, out, errOut)
	}
	if got := b.overrides(); len(got) != 1 || got[0] != (store.Limit{Name: "parser-api", Concurrency: 5, Rate: 2.5, Burst: 10}) {
		t.Errorf("overrides after set --rate 2.5: got %+v, want cap 5 (declared), rate 2.5, burst 10", got)
	}
	if v := b.ls()["parser-api"]; v.InForce == nil || v.InForce.Rate != 2.5 || v.Override == nil || v.Declared.Rate != 20 {
		t.Errorf("limits ls --json after set: got %+v, want in force rate 2.5 from the override, declared 20", v)
	}

	code, out, errOut = b.run("limits", "set", "orphan", "--concurrency", "1")
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(errOut, "applies to nothing") {
		t.Errorf("limits set of an undeclared name: stderr %q, want it to say the override applies to nothing", errOut)
	}
	if v := b.ls()["orphan"]; v.Applies || v.InForce != nil || v.Override == nil {
		t.Errorf("limits ls --json, orphan: got %+v, want an override that applies to nothing", v)
	}
	if _, out, _ := b.run("limits", "ls"); !strings.Contains(out, "override applies to nothing") {
		t.Errorf("limits ls: orphan not marked as applying to nothing:\n%s", out)
	}

	code, out, errOut = b.run("limits", "reset", "parser-api")
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "in force: cap 5, 20/s burst 10 (declared)") {
		t.Errorf("limits reset: got %q, want the declared values in force", out)
	}
	if got := b.overrides(); len(got) != 1 || got[0].Name != "orphan" {
		t.Errorf("overrides after reset: got %+v, want only orphan's", got)
	}
	if v := b.ls()["parser-api"]; v.Override != nil || v.InForce == nil || v.InForce.Concurrency != 5 {
		t.Errorf("limits ls --json after reset: got %+v, want the declared values in force", v)
	}
	code, out, errOut = b.run("limits", "reset", "parser-api")
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "no override") {
		t.Errorf("limits reset twice: got %q, want it to say there is no override", out)
	}
}

func TestLimitsSetRefusesBadValues(t *testing.T) {
	t.Parallel()
	b := setupLimitsSQLite(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--concurrency", "-1"}, "--concurrency is -1"},
		{[]string{"--rate", "-0.5"}, "--rate is -0.5"},
		{[]string{"--rate", "NaN"}, "--rate is NaN"},
		{[]string{"--rate", "+Inf"}, "--rate is +Inf"},
		{[]string{"--rate", "fast"}, "--rate"},
		{[]string{"--burst", "-2"}, "--burst is -2"},
		{[]string{"--concurrency", "2.5"}, "--concurrency"},
		{nil, "give --concurrency, --rate or --burst"},
	} {
		code, _, errOut := b.run(append([]string{"limits", "set", "api"}, tc.args...)...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("limits set api %v: exit %d, stderr %q; want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if got := b.overrides(); len(got) != 0 {
		t.Errorf("overrides after refused sets: got %+v, want none", got)
	}
}

func TestLimitsHostileNames(t *testing.T) {
	t.Parallel()
	b := setupLimitsSQLite(t)
	for _, bad := range []string{"a\x00b", "a\xffb", strings.Repeat("n", store.MaxLimitName+1), ""} {
		for _, args := range [][]string{{"limits", "set", bad, "--concurrency", "1"}, {"limits", "reset", bad}} {
			code, _, errOut := b.run(args...)
			if code != 2 || !strings.Contains(errOut, "limit") || strings.ContainsRune(errOut, 0) || strings.Contains(errOut, "\xff") {
				t.Errorf("idem %q: exit %d, stderr %q; want 2 and a message about the limit's name, quoted", args, code, errOut)
			}
		}
	}
	script, esc := `<script>alert(1)</script>`, "red\x1b[31m"
	for _, name := range []string{script, esc} {
		if code, out, errOut := b.run("limits", "set", name, "--concurrency", "3"); code != 0 {
			t.Fatalf("limits set %q: exit %d, %s%s", name, code, out, errOut)
		}
	}
	ctx := context.Background()
	k := store.LimitKey{Name: script, Key: "tenant\x1b]0;x\a"}
	if _, err := b.l.Admit(ctx, &store.AdmitParams{Limits: map[string]store.Limit{script: {Name: script, Concurrency: 3}},
		Requests: []store.AdmitRequest{{Holder: "h", Keys: []store.LimitKey{k}}}, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := b.run("limits", "ls")
	wantExit(t, code, out, errOut, 0)
	if strings.ContainsRune(out, 0x1b) || strings.ContainsRune(out, '\a') {
		t.Errorf("limits ls printed a control character raw:\n%q", out)
	}
	for _, want := range []string{script, `"red\x1b[31m"`, `"tenant\x1b]0;x\a"`} {
		if !strings.Contains(out, want) {
			t.Errorf("limits ls lacks %q:\n%s", want, out)
		}
	}
	views := b.ls()
	if v, ok := views[esc]; !ok || v.Override == nil || v.Override.Concurrency != 3 {
		t.Errorf("limits ls --json: %q not kept exactly: %+v", esc, views)
	}
	if v := views[script]; len(v.Counters) != 1 || v.Counters[0].Key != k.Key {
		t.Errorf("limits ls --json: key %q not kept exactly: %+v", k.Key, v)
	}
	for _, name := range []string{script, esc} {
		if code, out, errOut := b.run("limits", "reset", name); code != 0 || !strings.Contains(out, "removed the override") {
			t.Errorf("limits reset %q: exit %d, %s%s", name, code, out, errOut)
		}
	}
}

func TestLimitsHelp(t *testing.T) {
	t.Parallel()
	code, out, errOut := run(t, "limits", "set", "--help")
	wantExit(t, code, out, errOut, 0)
	for _, want := range []string{"--concurrency", "--rate", "--burst", "keeps the value the code declares", "Config.LimitsInterval (1s by default)", "IDEM_STORE"} {
		if !strings.Contains(out, want) {
			t.Errorf("limits set --help lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = run(t, "limits", "--help")
	wantExit(t, code, out, errOut, 0)
	for _, want := range []string{"ls", "set", "reset", "Config.Limits"} {
		if !strings.Contains(out, want) {
			t.Errorf("limits --help lacks %q:\n%s", want, out)
		}
	}
	code, out, errOut = run(t, "limits", "ls", "--help")
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "applies to nothing") || !strings.Contains(out, "--json") {
		t.Errorf("limits ls --help does not explain orphans and --json:\n%s", out)
	}
}

func TestLimitsOnAStoreWithout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	code, _, errOut := run(t, "limits", "ls", "--store", "sqlite://"+filepath.Join(dir, "none.db"))
	if code != 2 || !strings.Contains(errOut, "idem migrate") {
		t.Errorf("limits ls on an unmigrated store: exit %d, stderr %q; want 2 and the idem migrate hint", code, errOut)
	}
}

// waitOnDB publishes three messages that need the limit db (a cap of 2)
// and runs an admitting receive: two are admitted, the third waits.
func waitOnDB(t *testing.T, q store.AdmittingQueue) {
	t.Helper()
	ctx := context.Background()
	var envs []transport.Envelope
	for _, id := range []string{"d-1", "d-2", "d-3"} {
		envs = append(envs, transport.Envelope{ID: id, Type: "db.Query", CorrelationID: id})
	}
	if err := q.Publish(ctx, envs); err != nil {
		t.Fatal(err)
	}
	db := []store.LimitKey{{Name: "db"}}
	ds, err := q.ReceiveAdmitted(ctx, &store.ReceiveParams{Max: 10, Limits: map[string]store.Limit{"db": {Name: "db", Concurrency: 2}},
		Needs: func(*transport.Envelope) []store.LimitKey { return db }})
	if err != nil || len(ds) != 2 {
		t.Fatalf("receive admitted under db's cap of 2: got %d deliveries, error %v; want 2", len(ds), err)
	}
}

// idem limits ls notes a declaration no running engine declared for
// store.DeclarationStale, in its table and in --json, and only that one.
func TestLimitsLsMarksStaleDeclarations(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 8, 1, 0, 0, 0, time.UTC)
	old := now.Add(-store.DeclarationStale - time.Second)
	declared := []store.Limit{
		{Name: "fresh", Concurrency: 1, UpdatedAt: now.Add(-store.DeclarationRefresh)},
		{Name: "removed", Concurrency: 2, UpdatedAt: old},
	}
	views := limitViews(declared, []store.Limit{{Name: "removed", Concurrency: 3, UpdatedAt: old}}, nil, now)
	if len(views) != 2 || views[0].DeclarationStale || !views[1].DeclarationStale {
		t.Fatalf("limitViews: got %+v, want only removed's declaration stale", views)
	}
	var out strings.Builder
	if err := printLimits(&out, views); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	want := "not declared by a running engine since " + old.Format(time.RFC3339)
	if !strings.Contains(lines[2], "removed") || !strings.Contains(lines[2], want) || strings.Contains(lines[1], "not declared") {
		t.Errorf("limits ls: got\n%s\nwant removed's row, and only it, noted %q", out.String(), want)
	}
	js, err := json.Marshal(limitList{Limits: views})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(js), `"declaration_stale":true`) != 1 {
		t.Errorf("limits ls --json: got %s, want declaration_stale true once", js)
	}
}

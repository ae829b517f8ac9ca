package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/natsjs"
	"github.com/idemhq/idem/transport/natsjs/natsembed"
)

// pgBundle is one test's PostgreSQL schema, dropped at cleanup.
type pgBundle struct {
	t      *testing.T
	url    string
	schema string
}

func setupPG(t *testing.T) *pgBundle {
	t.Helper()
	u := testenv.PostgresURL(t)
	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "cli_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return &pgBundle{t: t, url: u, schema: schema}
}

// run runs the command line against the bundle's schema.
func (b *pgBundle) run(args ...string) (int, string, string) {
	b.t.Helper()
	return run(b.t, append(args, "--store", b.url, "--schema", b.schema)...)
}

// open opens the bundle's schema, migrating it; closed at cleanup (before
// the schema is dropped).
func (b *pgBundle) open() *pgstore.Store {
	b.t.Helper()
	st, err := pgstore.Open(context.Background(), b.url, &pgstore.Config{Schema: b.schema, Migrate: true})
	if err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() { _ = st.Close() })
	return st
}

func seed(t *testing.T, st store.Store, dls ...store.DeadLetter) {
	t.Helper()
	ctx := context.Background()
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = uow.Rollback(ctx) }()
	if err := uow.Commit(ctx, &store.Changes{DeadLetters: dls}); err != nil {
		t.Fatal(err)
	}
}

// deadLetter returns a dead letter with ID id, last failed age ago.
func deadLetter(id, reason string, age time.Duration) store.DeadLetter {
	at := time.Now().UTC().Add(-age).Truncate(time.Microsecond)
	return store.DeadLetter{
		ID: id,
		Envelope: transport.Envelope{
			ID: id, Type: "searchimport.SearchRequested", CorrelationID: "corr-" + id,
			Headers: map[string]string{"traceparent": "00-abc-def-01", "idem-intent": "send"},
			SentAt:  at, Body: []byte(`{"search":"` + id + `","n":1}`),
		},
		Reason: reason, Error: "apply " + id + ": decode body: unexpected end of JSON input",
		SagaType: "search", Key: "k-" + id, Attempts: 3, FirstFailedAt: at.Add(-time.Minute), LastFailedAt: at,
	}
}

func wantExit(t *testing.T, code int, out, errOut string, want int) {
	t.Helper()
	if code != want {
		t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", code, want, out, errOut)
	}
}

func TestMigrateIsIdempotent(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	want := "schema " + b.schema + " at version " + strconv.Itoa(pgstore.SchemaVersion()) + "\n"
	for i := range 2 {
		code, out, errOut := b.run("migrate")
		wantExit(t, code, out, errOut, 0)
		if out != want {
			t.Errorf("run %d: got %q, want %q", i+1, out, want)
		}
	}
	// The migrated schema opens without --migrate.
	code, out, errOut := b.run("dlq", "ls")
	wantExit(t, code, out, errOut, 0)
	if out != "no dead letters\n" {
		t.Errorf("got %q, want %q", out, "no dead letters\n")
	}
}

func TestUnmigratedSchemaSaysRunMigrate(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	for _, args := range [][]string{{"dlq", "ls"}, {"dlq", "show", "x"}, {"dlq", "replay", "x"}, {"dlq", "purge", "x"}} {
		code, out, errOut := b.run(args...)
		wantExit(t, code, out, errOut, 2)
		if !strings.Contains(errOut, "idem migrate") {
			t.Errorf("%v: stderr %q does not say to run idem migrate", args, errOut)
		}
	}
	// --migrate creates the schema on the way.
	code, out, errOut := b.run("dlq", "purge", "--all", "--yes", "--migrate")
	wantExit(t, code, out, errOut, 0)
}

func TestStoreErrorsAreUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dlq", "ls", "--store", "mysql://root:hunter2@db/x"}, "unsupported store"},
		{[]string{"migrate", "--store", "mysql://x"}, "unsupported store"},
		{[]string{"dlq", "ls", "--store", ""}, "no store given"},
		{[]string{"migrate", "--store", "postgres://idem:hunter2@127.0.0.1:1/idem?connect_timeout=5"}, "cannot reach PostgreSQL"},
		{[]string{"dlq", "ls", "--schema", "no-dashes", "--store", "postgres://idem:hunter2@127.0.0.1:1/idem"}, "not a plain identifier"},
		{[]string{"dlq", "ls", "--limit", "0", "--store", "postgres://x@127.0.0.1:1/idem"}, "--limit takes a whole number from 1 to 1000"},
		{[]string{"dlq", "show"}, "accepts 1 arg"},
		{[]string{"dlq", "replay", "--store", "postgres://x@127.0.0.1:1/idem"}, "no dead letters named"},
		{[]string{"dlq", "replay", "a", "--all"}, "not both"},
		{[]string{"dlq", "replay", "a", "--reason", "x"}, "use it with --all"},
		{[]string{"dlq", "purge", "a", "--older-than", "1h"}, "use it with --all"},
		{[]string{"dlq", "purge", "--all", "--yes", "--older-than", "soon"}, "--older-than"},
		{[]string{"dlq", "purge", "--all", "--yes", "--older-than", "-1h"}, "positive"},
		{[]string{"dlq"}, "needs a subcommand"},
	} {
		code, out, errOut := run(t, tc.args...)
		wantExit(t, code, out, errOut, 2)
		if !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: stderr %q lacks %q", tc.args, errOut, tc.want)
		}
		if strings.Contains(out+errOut, "hunter2") {
			t.Errorf("%v: the password was printed: %q", tc.args, errOut)
		}
	}
}

// TestStoreFromEnvironment cannot run in parallel: it sets IDEM_STORE.
// Without it, every command uses one default (TestOneDefaultStoreForEveryCommand).
func TestStoreFromEnvironment(t *testing.T) {
	t.Setenv("IDEM_STORE", "mysql://x")
	for _, args := range [][]string{{"migrate"}, {"dlq", "ls"}, {"dlq", "purge", "x"}} {
		code, out, errOut := run(t, args...)
		wantExit(t, code, out, errOut, 2)
		if !strings.Contains(errOut, "unsupported store") || !strings.Contains(errOut, "from IDEM_STORE") {
			t.Errorf("%v: stderr %q: IDEM_STORE was not used, or not named", args, errOut)
		}
	}
}

func TestHelpExplainsEveryFlag(t *testing.T) {
	t.Parallel()
	root := newRoot(nil, nil)
	var check func(c *cobra.Command)
	check = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			check(sub)
		}
		if c.Name() != "migrate" && c.Parent() != nil && c.Parent().Name() != "dlq" {
			return
		}
		if c.Long == "" {
			t.Errorf("%s has no Long help", c.CommandPath())
		}
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" || f.Hidden {
				return
			}
			if f.Usage == "" {
				t.Errorf("%s --%s has no usage", c.CommandPath(), f.Name)
			}
			if !strings.Contains(c.Long, "--"+f.Name) {
				t.Errorf("%s: Long help does not explain --%s", c.CommandPath(), f.Name)
			}
		})
	}
	check(root)

	code, out, errOut := run(t, "dlq", "purge", "--help")
	wantExit(t, code, out, errOut, 0)
	for _, want := range []string{"--older-than", "--yes", "IDEM_STORE", "7d"} {
		if !strings.Contains(out, want) {
			t.Errorf("purge --help lacks %q:\n%s", want, out)
		}
	}
}

func TestDLQList(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	st := b.open()
	bin := deadLetter("c-binary", "malformed_body", time.Hour)
	bin.Envelope.Body = []byte{0xff, 0x00, 0x1b, '['}
	bin.SagaType, bin.Key = "", ""
	other := deadLetter("b-other", "unknown_type", 2*time.Hour)
	other.SagaType = "billing"
	seeded := []store.DeadLetter{deadLetter("a-first", "permanent_error", 3*time.Hour), other, bin}
	seed(t, st, seeded...)

	code, out, errOut := b.run("dlq", "ls")
	wantExit(t, code, out, errOut, 0)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("got %d lines, want a header and 3 rows:\n%s", len(lines), out)
	}
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "ID REASON MESSAGE TYPE SAGA ATTEMPTS LAST FAILED" {
		t.Errorf("header %q", lines[0])
	}
	for i, want := range [][]string{
		{"a-first", "permanent_error", "searchimport.SearchRequested", "search/k-a-first", "3"},
		{"b-other", "unknown_type", "searchimport.SearchRequested", "billing/k-b-other", "3"},
		{"c-binary", "malformed_body", "searchimport.SearchRequested", "-", "3"},
	} {
		got := strings.Fields(lines[i+1])
		if len(got) != 6 || strings.Join(got[:5], " ") != strings.Join(want, " ") {
			t.Errorf("row %d: got %q, want %q and a time", i+1, lines[i+1], want)
		}
	}
	if errOut != "" {
		t.Errorf("stderr %q, want nothing: the page is not full", errOut)
	}

	code, out, errOut = b.run("dlq", "ls", "--json")
	wantExit(t, code, out, errOut, 0)
	// The shape is the API's (admin.DeadLetter): a JSON body as JSON, a
	// binary one as base64, and the state.
	var got []admin.DeadLetter
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not a JSON array: %v\n%s", err, out)
	}
	if len(got) != 3 || got[0].ID != "a-first" || got[2].ID != "c-binary" {
		t.Fatalf("got %+v, want a-first, b-other, c-binary", got)
	}
	var body bytes.Buffer
	if e := got[0].Envelope; json.Compact(&body, e.Body) != nil || body.String() != `{"search":"a-first","n":1}` || e.BodyEncoding != "json" || e.Headers["idem-intent"] != "send" {
		t.Errorf("envelope body %s (%s), headers %v: want the JSON body as JSON, body_encoding json, and the headers", e.Body, e.BodyEncoding, e.Headers)
	}
	if e := got[2].Envelope; e.BodyEncoding != "base64" || string(e.Body) != `"`+base64.StdEncoding.EncodeToString(bin.Envelope.Body)+`"` {
		t.Errorf("binary body %s (%s), want a base64 string", e.Body, e.BodyEncoding)
	}
	if want := seeded[0]; got[0].Reason != want.Reason || got[0].Attempts != 3 || got[0].SagaType != "search" ||
		got[0].Key != "k-a-first" || !got[0].LastFailedAt.Equal(want.LastFailedAt) || got[0].State != store.DeadLettersUnresolved {
		t.Errorf("first %+v", got[0])
	}

	// Paging: a full page hints at the cursor on stderr, stdout stays JSON.
	code, out, errOut = b.run("dlq", "ls", "--json", "--limit", "2")
	wantExit(t, code, out, errOut, 0)
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 2 {
		t.Fatalf("page 1: %v, %d elements\n%s", err, len(got), out)
	}
	if !strings.Contains(errOut, "--after b-other") {
		t.Errorf("stderr %q lacks the next-page cursor", errOut)
	}
	code, out, errOut = b.run("dlq", "ls", "--after", "b-other")
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "c-binary") || strings.Contains(out, "a-first") || strings.Contains(out, "b-other") {
		t.Errorf("page 2:\n%s", out)
	}

	code, out, errOut = b.run("dlq", "ls", "--saga-type", "billing", "--json")
	wantExit(t, code, out, errOut, 0)
	if err := json.Unmarshal([]byte(out), &got); err != nil || len(got) != 1 || got[0].ID != "b-other" {
		t.Errorf("--saga-type billing: %v %+v", err, got)
	}
	code, out, errOut = b.run("dlq", "ls", "--saga-type", "nope", "--json")
	wantExit(t, code, out, errOut, 0)
	if strings.TrimSpace(out) != "[]" {
		t.Errorf("empty page: got %q, want []", out)
	}
}

func TestDLQShow(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	st := b.open()
	d := deadLetter("show-me", "retries_exhausted", time.Hour)
	d.Envelope.IdempotencyKey = "sha256:abc"
	hostile := deadLetter("hostile", "malformed_body", time.Hour)
	hostile.Envelope.Type = "evil\x1b[2J"
	hostile.Envelope.Body = []byte("text with \x1b]0;pwned\x07 escape")
	seed(t, st, d, hostile)

	code, out, errOut := b.run("dlq", "show", "show-me")
	wantExit(t, code, out, errOut, 0)
	for _, want := range []string{
		"ID:", "show-me", "Reason:", "retries_exhausted", "Saga:", "search/k-show-me", "Attempts:", "3",
		"First failed:", "Last failed:", d.LastFailedAt.Format(time.RFC3339Nano),
		"Type:", "searchimport.SearchRequested", "Correlation ID:", "corr-show-me", "Idempotency key:", "sha256:abc",
		"Headers:", "idem-intent:", "send", "traceparent:", "00-abc-def-01",
		"Body (", "JSON", `"search": "show-me"`,
		"Error:", "  apply show-me: decode body: unexpected end of JSON input",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("show lacks %q:\n%s", want, out)
		}
	}

	code, out, errOut = b.run("dlq", "show", "show-me", "--json")
	wantExit(t, code, out, errOut, 0)
	var got admin.DeadLetter
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if got.ID != "show-me" || got.Error != d.Error || got.Envelope.IdempotencyKey != "sha256:abc" ||
		!got.FirstFailedAt.Equal(d.FirstFailedAt) || !got.Envelope.SentAt.Equal(d.Envelope.SentAt) {
		t.Errorf("got %+v, want %+v", got, d)
	}

	// Terminal escapes from producers never reach the terminal raw.
	code, out, errOut = b.run("dlq", "show", "hostile")
	wantExit(t, code, out, errOut, 0)
	if strings.ContainsRune(out, 0x1b) {
		t.Errorf("show printed a raw escape character:\n%q", out)
	}
	if !strings.Contains(out, `"evil\x1b[2J"`) || !strings.Contains(out, "hex dump") {
		t.Errorf("want the type quoted and the body as a hex dump:\n%s", out)
	}

	code, out, errOut = b.run("dlq", "show", "nope")
	wantExit(t, code, out, errOut, 1)
	if !strings.Contains(errOut, "no dead letter with ID nope") {
		t.Errorf("stderr %q", errOut)
	}
}

func TestDLQReplayMovesTheMessageOntoTheQueue(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	st := b.open()
	seed(t, st, deadLetter("r1", "permanent_error", time.Hour), deadLetter("r2", "unknown_type", time.Hour),
		deadLetter("r3", "unknown_type", time.Hour))

	code, out, errOut := b.run("dlq", "replay", "r1")
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "re-queued r1 (searchimport.SearchRequested)") || !strings.Contains(out, "re-queued 1 dead letter: each replay is pending") {
		t.Errorf("stdout %q", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ds, err := st.Receive(ctx, 10)
	if err != nil {
		t.Fatalf("receive the replayed message: %v", err)
	}
	if len(ds) != 1 || ds[0].Envelope.ID != "r1" || string(ds[0].Envelope.Body) != `{"search":"r1","n":1}` ||
		ds[0].Envelope.Headers["traceparent"] != "00-abc-def-01" {
		t.Fatalf("received %+v, want r1 with its body and headers", ds)
	}
	if d, err := st.GetDeadLetter(context.Background(), "r1"); err != nil || len(d.Replays) != 1 || d.Replays[0].Outcome != store.ReplayPending {
		t.Errorf("dead letter r1 after replay: %+v, %v; want it kept, its replay pending", d, err)
	}

	// A missing ID fails the command; the others are still replayed.
	code, out, errOut = b.run("dlq", "replay", "missing", "r2")
	wantExit(t, code, out, errOut, 1)
	if !strings.Contains(errOut, "no dead letter with ID missing") || !strings.Contains(errOut, "re-queued 1 of 2 dead letters; 1 failed") ||
		!strings.Contains(out, "re-queued r2") {
		t.Errorf("stdout %q\nstderr %q", out, errOut)
	}

	// --all with a reason that matches nothing is not an error.
	code, out, errOut = b.run("dlq", "replay", "--all", "--reason", "nothing_like_it")
	wantExit(t, code, out, errOut, 0)
	if out != "no dead letters match\n" {
		t.Errorf("stdout %q", out)
	}
	// r2, whose replay is pending, is not selected again: only r3 is
	// re-queued.
	code, out, errOut = b.run("dlq", "replay", "--all", "--reason", "unknown_type", "--saga-type", "search")
	wantExit(t, code, out, errOut, 0)
	if !strings.Contains(out, "re-queued r3") || strings.Contains(out, "re-queued r2") || !strings.Contains(out, "re-queued 1 dead letter") {
		t.Errorf("stdout %q", out)
	}
	ds, err = st.Receive(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, d := range ds {
		ids[d.Envelope.ID] = true
	}
	if len(ds) != 2 || !ids["r2"] || !ids["r3"] {
		t.Errorf("queue holds %d: %v, want r2 (its one replay) and r3", len(ds), ids)
	}
	if left, err := st.ListDeadLetters(context.Background(), nil); err != nil || len(left) != 3 {
		t.Errorf("dead letters left: %v %v; want all three, kept with their history", left, err)
	}
}

func TestDLQPurge(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	st := b.open()
	seed(t, st,
		deadLetter("p1", "permanent_error", time.Minute),
		deadLetter("p2", "permanent_error", 3*24*time.Hour),
		deadLetter("p3", "unknown_type", 3*24*time.Hour),
		deadLetter("p4", "unknown_type", time.Minute))
	count := func() int {
		t.Helper()
		dls, err := st.ListDeadLetters(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return len(dls)
	}

	code, out, errOut := b.run("dlq", "purge", "p1", "p1")
	wantExit(t, code, out, errOut, 0)
	if out != "deleted 1 dead letter\n" || count() != 3 {
		t.Errorf("stdout %q, %d left", out, count())
	}
	code, out, errOut = b.run("dlq", "purge", "p1")
	wantExit(t, code, out, errOut, 1)
	if out != "deleted 0 dead letters\n" || !strings.Contains(errOut, "did not exist") {
		t.Errorf("stdout %q\nstderr %q", out, errOut)
	}

	code, out, errOut = b.run("dlq", "purge", "--all")
	wantExit(t, code, out, errOut, 2)
	if !strings.Contains(errOut, "add --yes") || count() != 3 {
		t.Errorf("stderr %q, %d left", errOut, count())
	}

	code, out, errOut = b.run("dlq", "purge", "--all", "--yes", "--older-than", "2d", "--reason", "unknown_type")
	wantExit(t, code, out, errOut, 0)
	if out != "deleted 1 dead letter\n" || count() != 2 {
		t.Errorf("stdout %q, %d left", out, count())
	}
	if _, err := st.GetDeadLetter(context.Background(), "p3"); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("p3: %v, want it purged", err)
	}

	code, out, errOut = b.run("dlq", "purge", "--all", "--yes")
	wantExit(t, code, out, errOut, 0)
	if out != "deleted 2 dead letters\n" || count() != 0 {
		t.Errorf("stdout %q, %d left", out, count())
	}
}

func TestParseAge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"", 0, true}, {"90m", 90 * time.Minute, true}, {"72h", 72 * time.Hour, true}, {"7d", 7 * 24 * time.Hour, true},
		{"0", 0, false}, {"-1h", 0, false}, {"-2d", 0, false}, {"d", 0, false}, {"1.5d", 0, false}, {"36500d", 36500 * 24 * time.Hour, true}, {"200000d", 0, false}, {"soon", 0, false},
	} {
		got, err := parseAge(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("parseAge(%q) = %v, %v; want %v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
	}
}

func TestClean(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, want string }{
		{"plain-id", "plain-id"}, {"café ☕", "café ☕"}, {"a\nb", `"a\nb"`}, {"\x1b[31m", `"\x1b[31m"`},
		{"\xff", `"\xff"`}, {"abc\u202edcba", `"abc\u202edcba"`},
	} {
		if got := clean(tc.in); got != tc.want {
			t.Errorf("clean(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}

// With --transport, replay publishes onto the broker the engines consume,
// not onto the store's queue; the embedded server of another process is
// refused with the way to reach it.
func TestDLQReplayOntoABroker(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	st := b.open()
	seed(t, st, deadLetter("n1", "permanent_error", time.Hour))
	srv, err := natsembed.Start(t.Context(), t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()

	code, out, errOut := b.run("dlq", "replay", "n1", "--transport", transportEmbedded)
	wantExit(t, code, out, errOut, 2)
	if !strings.Contains(errOut, "/api/dead-letters/{id}/replay") {
		t.Errorf("stderr %q, want the admin API named", errOut)
	}

	// Before any engine created the stream, replay refuses rather than
	// publish where nobody reads.
	code, out, errOut = b.run("dlq", "replay", "n1", "--transport", srv.URL())
	wantExit(t, code, out, errOut, 2)
	if !strings.Contains(errOut, "stream IDEM does not exist") {
		t.Errorf("stderr %q, want the missing stream named", errOut)
	}

	tr, err := natsjs.Open(t.Context(), srv.URL(), nil) // the engines' side
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	code, out, errOut = b.run("dlq", "replay", "n1", "--transport", srv.URL())
	wantExit(t, code, out, errOut, 0)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ds, err := tr.Receive(ctx, 10)
	if err != nil || len(ds) != 1 || ds[0].Envelope.ID != "n1" || string(ds[0].Envelope.Body) != `{"search":"n1","n":1}` {
		t.Fatalf("received %+v (%v) from the broker, want n1 with its body", ds, err)
	}
	sctx, scancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer scancel()
	if extra, err := st.Receive(sctx, 10); len(extra) != 0 {
		t.Errorf("the store's queue got %+v (%v), want nothing: the replay goes to the broker", extra, err)
	}
}

package ledger_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/dispatch/ledger"
	"github.com/idemhq/idem/internal/testenv"
)

// testKey is the pseudonymisation key of the tests (never a real one).
const testKey = "test-key-0123456789abcdef0123456789abcdef"

// childEnv marks a child process of this test binary that runs ledger.Main
// with the JSON-encoded arguments in the variable's value.
const childEnv = "DISPATCH_TEST_CHILD_ARGS"

func TestMain(m *testing.M) {
	if arg := os.Getenv(dyingEnv); arg != "" {
		os.Exit(runDyingWriter(arg))
	}
	if args := os.Getenv(childEnv); args != "" {
		var a []string
		if err := json.Unmarshal([]byte(args), &a); err != nil {
			fmt.Fprintln(os.Stderr, "bad child args:", err)
			os.Exit(2)
		}
		os.Exit(ledger.Main(context.Background(), a, os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// backend is one database to run a test on: a SQLite file or a PostgreSQL
// schema of its own.
type backend struct {
	name   string
	dsn    string
	schema string
}

// args returns the -db and -schema flags for the command line.
func (b backend) args() []string { return []string{"-db", b.dsn, "-schema", b.schema} }

func randHex() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// eachBackend runs fn on SQLite and on PostgreSQL.
func eachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Run("sqlite", func(t *testing.T) {
		fn(t, backend{name: "sqlite", dsn: filepath.Join(t.TempDir(), "dispatch.db"), schema: "dispatch"})
	})
	t.Run("postgres", func(t *testing.T) {
		url := testenv.PostgresURL(t)
		b := backend{name: "postgres", dsn: url, schema: "dispatch_" + randHex()}
		t.Cleanup(func() {
			ctx := context.Background()
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Errorf("drop schema %s: %v", b.schema, err)
				return
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{b.schema}.Sanitize()+" CASCADE"); err != nil {
				t.Errorf("drop schema %s: %v", b.schema, err)
			}
		})
		fn(t, b)
	})
}

func pseudonymizer(t testing.TB) *ledger.Pseudonymizer {
	t.Helper()
	p, err := ledger.NewPseudonymizer([]byte(testKey))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// writeEvents writes raw events as a JSON-lines file and returns its path.
func writeEvents(t testing.TB, evs []ledger.RawEvent) string {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, e := range evs {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	path := filepath.Join(t.TempDir(), "events.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runMain runs the command line in-process.
func runMain(t testing.TB, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	t.Setenv(ledger.KeyEnv, testKey)
	var o, e bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code = ledger.Main(ctx, args, strings.NewReader(""), &o, &e)
	return code, o.String(), e.String()
}

// validate runs "dispatch validate" and decodes its report.
func validate(t testing.TB, b backend, extra ...string) (int, ledger.Report) {
	t.Helper()
	code, out, errOut := runMain(t, append(append([]string{"validate"}, b.args()...), extra...)...)
	var rep ledger.Report
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("validate exit %d, output %q, stderr %q: %v", code, out, errOut, err)
	}
	return code, rep
}

// child is one writer process: this test binary running ledger.Main.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	stdout *bufio.Reader
	stderr bytes.Buffer
}

// startChild starts a writer process that announces "ready" and waits for
// a line on stdin before publishing.
func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	a, _ := json.Marshal(args)
	c := &child{cmd: exec.Command(os.Args[0], "-test.run=^$")}
	c.cmd.Env = append(os.Environ(), childEnv+"="+string(a), ledger.KeyEnv+"="+testKey)
	c.cmd.Stderr = &c.stderr
	var err error
	if c.stdin, err = c.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.stdout = bufio.NewReader(out)
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	return c
}

// ready blocks until the child printed "ready".
func (c *child) ready(t *testing.T) {
	t.Helper()
	if err := c.waitReady(); err != nil {
		t.Fatal(err)
	}
}

// waitReady is ready returning its error instead. When the child is not
// ready, it stops the child and waits for it: c.stderr is written
// by exec's copying goroutine until Wait returns, and is complete then.
func (c *child) waitReady() error {
	line, err := c.stdout.ReadString('\n')
	if err == nil && strings.TrimSpace(line) == "ready" {
		return nil
	}
	c.cmd.Process.Kill()
	werr := c.cmd.Wait()
	return fmt.Errorf("child not ready: %q, %v (%v); stderr:\n%s", line, err, werr, c.stderr.String())
}

// finish waits for the child and decodes its summary.
func (c *child) finish(t *testing.T) ledger.WriteSummary {
	t.Helper()
	s, err := c.result()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// result waits for the child and decodes its summary; unlike finish it
// may run on another goroutine than the test's.
func (c *child) result() (ledger.WriteSummary, error) {
	var s ledger.WriteSummary
	rest, _ := io.ReadAll(c.stdout)
	if err := c.cmd.Wait(); err != nil {
		return s, fmt.Errorf("writer failed: %w; stdout %q; stderr:\n%s", err, rest, c.stderr.String())
	}
	if err := json.Unmarshal(rest, &s); err != nil {
		return s, fmt.Errorf("writer summary %q: %w", rest, err)
	}
	return s, nil
}

// startWriter opens a writer on b with cfg (the backoff of "dispatch write"
// when cfg.Engine is nil), starts it, and closes it when the test ends.
func startWriter(t *testing.T, b backend, cfg ledger.WriterConfig) *ledger.Writer {
	t.Helper()
	cfg.DSN, cfg.Schema = b.dsn, b.schema
	if cfg.Engine == nil {
		cfg.Engine = testEngine()
	}
	ctx := context.Background()
	w, err := ledger.OpenWriter(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(context.Background()); err != nil {
			t.Errorf("close writer: %v", err)
		}
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

// apply publishes env and waits until its saga committed it (or had), or
// dead-lettered it (an error wrapping idem.ErrDeadLettered).
func apply(t *testing.T, w *ledger.Writer, env idem.Envelope) (idem.Result, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return w.Engine().PublishAndWait(ctx, env)
}

// envelope is the envelope of ev as a writer publishes it.
func envelope(t *testing.T, ev ledger.Event) idem.Envelope {
	t.Helper()
	env, err := ledger.Envelope(ev)
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// mustApply applies ev and fails the test unless it was committed now.
func mustApply(t *testing.T, w *ledger.Writer, ev ledger.Event) idem.Result {
	t.Helper()
	r, err := apply(t, w, envelope(t, ev))
	if err != nil || r.Duplicate {
		t.Fatalf("apply %s seq %d: %+v, %v; want it applied", ev.Kind, ev.Seq, r, err)
	}
	return r
}

// ledgerOf returns the ledger rows and notifications of the patient pn.
func ledgerOf(t *testing.T, d *ledger.DB, pn string) (rows []ledger.Row, notes []ledger.Notification) {
	t.Helper()
	ctx := context.Background()
	all, err := d.Rows(ctx, ledger.Strict)
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, r := range all {
		if r.Patient == pn {
			rows = append(rows, r)
			ids[r.EventID] = true
		}
	}
	ns, err := d.Notifications(ctx, ledger.Strict)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns {
		if ids[n.EventID] {
			notes = append(notes, n)
		}
	}
	return rows, notes
}

// kinds lists the kinds of rows in ledger order.
func kinds(rows []ledger.Row) string {
	var s []string
	for _, r := range rows {
		s = append(s, fmt.Sprintf("%d:%s", r.Seq, r.Kind))
	}
	return strings.Join(s, " ")
}

// countEvent returns how many ledger rows and notifications carry the
// identity of ev.
func countEvent(t *testing.T, d *ledger.DB, ev ledger.Event) (rows, notes int) {
	t.Helper()
	rows, notes, err := count(context.Background(), d, ev)
	if err != nil {
		t.Fatal(err)
	}
	return rows, notes
}

// count is countEvent for goroutines other than the test's.
func count(ctx context.Context, d *ledger.DB, ev ledger.Event) (rows, notes int, err error) {
	all, err := d.Rows(ctx, ledger.Strict)
	if err != nil {
		return 0, 0, err
	}
	for _, r := range all {
		if r.EventID == ev.ID() {
			rows++
		}
	}
	ns, err := d.Notifications(ctx, ledger.Strict)
	if err != nil {
		return 0, 0, err
	}
	for _, n := range ns {
		if n.EventID == ev.ID() {
			notes++
		}
	}
	return rows, notes, nil
}

package cli

import (
	"strings"
	"testing"
)

// Every command uses one default store, sqlite:idem.db in the working
// directory: migrate creates it, and the read commands then find it.
// Not parallel: it changes the working directory and IDEM_STORE.
func TestOneDefaultStoreForEveryCommand(t *testing.T) {
	t.Chdir(t.TempDir())
	t.Setenv("IDEM_STORE", "")
	code, _, errOut := run(t, "sagas", "ls")
	if code != 2 || !strings.Contains(errOut, "idem migrate") || strings.Contains(errOut, "no store given") {
		t.Errorf("sagas ls without idem.db: exit %d, err %q; want 2 and the migrate command", code, errOut)
	}
	if code, out, errOut := run(t, "migrate"); code != 0 || !strings.Contains(out, "version") {
		t.Fatalf("migrate: exit %d, out %q, err %q", code, out, errOut)
	}
	for _, args := range [][]string{{"sagas", "ls"}, {"timers", "ls"}, {"dlq", "ls"}, {"schedules", "ls"}} {
		code, out, errOut := run(t, args...)
		if code != 0 {
			t.Errorf("%v on the default store: exit %d, out %q, err %q", args, code, out, errOut)
		}
	}
	code, out, _ := run(t, "sagas", "ls")
	if out != "no sagas\n" {
		t.Errorf("empty sagas ls: exit %d, out %q, want no sagas", code, out)
	}
	if code, out, _ := run(t, "timers", "ls"); out != "no timers\n" {
		t.Errorf("empty timers ls: exit %d, out %q, want no timers", code, out)
	}
	code, _, errOut = run(t, "dlq", "ls", "--store", "")
	if code != 2 || !strings.Contains(errOut, "no store given") {
		t.Errorf("--store '': exit %d, err %q", code, errOut)
	}
}

// Read-only commands have no --migrate; the migrate hint names the schema
// and the flag where there is one.
func TestMigrateFlagAndHint(t *testing.T) {
	t.Parallel()
	b := setupPG(t)
	for _, args := range [][]string{{"sagas", "ls"}, {"sagas", "show", "t", "k"}, {"timers", "ls"}, {"dlq", "ls"}, {"dlq", "show", "x"}, {"schedules", "ls"}} {
		code, _, errOut := run(t, append(args, "--migrate", "--store", "sqlite:///nonexistent/x.db")...)
		if code != 2 || !strings.Contains(errOut, "unknown flag: --migrate") {
			t.Errorf("%v --migrate: exit %d, err %q; want unknown flag", args, code, errOut)
		}
	}
	code, _, errOut := b.run("sagas", "ls")
	if code != 2 || !strings.Contains(errOut, "idem migrate --store "+shellWord(b.url)+" --schema "+b.schema) || strings.Contains(errOut, "--migrate") {
		t.Errorf("sagas ls on an unmigrated schema: exit %d, err %q; want the migrate command with --schema, no --migrate", code, errOut)
	}
	code, _, errOut = b.run("timers", "cancel", "t", "k", "n")
	if code != 2 || !strings.Contains(errOut, "--schema "+b.schema+", or pass --migrate") {
		t.Errorf("timers cancel on an unmigrated schema: exit %d, err %q; want --schema and --migrate", code, errOut)
	}
}

// An unreachable server is named once, with where its URL came from.
// Not parallel: it sets IDEM_STORE.
func TestUnreachableServerNamesTheURLsSource(t *testing.T) {
	const u = "postgres://idem:hunter2@127.0.0.1:1/idem?connect_timeout=5"
	code, _, errOut := run(t, "sagas", "ls", "--store", u)
	if code != 2 || !strings.Contains(errOut, "from --store") || strings.Contains(errOut, "IDEM_STORE") || strings.Count(errOut, "connection refused") != 1 || strings.Contains(errOut, "hunter2") {
		t.Errorf("--store unreachable: exit %d, err %q; want the dial error once and --store named", code, errOut)
	}
	t.Setenv("IDEM_STORE", u)
	code, _, errOut = run(t, "sagas", "ls")
	if code != 2 || !strings.Contains(errOut, "from IDEM_STORE") || strings.Count(errOut, "connection refused") != 1 {
		t.Errorf("IDEM_STORE unreachable: exit %d, err %q; want IDEM_STORE named", code, errOut)
	}
}

// Help says what the commands do.
func TestHelpAgreesWithTheCommands(t *testing.T) {
	t.Parallel()
	_, out, _ := run(t, "bench", "--help")
	if strings.Contains(out, "sqlite") && !strings.Contains(out, "SQLite is not measured") || strings.Contains(out, "--migrate") {
		t.Errorf("bench --help offers SQLite or --migrate:\n%s", out)
	}
	_, out, _ = run(t, "migrate", "--help")
	if !strings.Contains(out, "SQLite") || strings.Contains(out, "PostgreSQL schema\n") {
		t.Errorf("migrate --help does not say it works on SQLite:\n%s", out)
	}
	_, out, _ = run(t, "timers", "cancel", "--help")
	if !strings.Contains(out, "--migrate") || strings.Contains(out, "changes nothing") {
		t.Errorf("timers cancel --help:\n%s", out)
	}
}

// demo --store takes the URL forms too; a small run gets its kills or is
// refused before it starts; off a terminal, progress is plain lines.
func TestDemoStoreFormsKillsAndProgress(t *testing.T) {
	t.Parallel()
	code, _, errOut := run(t, "demo", "--searches", "30")
	if code != 2 || !strings.Contains(errOut, "too small") {
		t.Errorf("demo --searches 30: exit %d, err %q; want refused as too small", code, errOut)
	}
	code, out, errOut := run(t, "demo", "--store", "memory:", "--searches", "40", "--lose-acks", "0")
	if code != 0 || strings.Contains(errOut, "\r") || !strings.Contains(errOut, "40/40 sagas finished\n") || !strings.Contains(out, "PASS") {
		t.Errorf("demo --store memory: off a terminal: exit %d, out %q, err %q; want plain progress lines", code, out, errOut)
	}
	if code, _, errOut := run(t, "demo", "--store", "sqlite:///tmp/a.db", "--db", "/tmp/b.db"); code != 2 || !strings.Contains(errOut, "two files") {
		t.Errorf("--store sqlite:///a --db b: exit %d, err %q", code, errOut)
	}
	db := t.TempDir() + "/demo.db"
	code, out, errOut = run(t, "demo", "--store", "sqlite://"+db, "--searches", "120", "--seed", "3")
	if code != 0 || !strings.Contains(out, "PASS") || !strings.Contains(out, "sqlite "+db) || strings.Contains(errOut, "\r") {
		t.Errorf("demo --store sqlite://%s --searches 120: exit %d, out %q, err %q; want PASS with its 3 kills", db, code, out, errOut)
	}
}

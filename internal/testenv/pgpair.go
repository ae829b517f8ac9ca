package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgPair is a throwaway PostgreSQL primary with a streaming standby on
// 127.0.0.1, for failover tests. Make it with PostgresPair; it is removed
// when the test ends. Its methods are not safe for concurrent use.
type PgPair struct {
	t       testing.TB
	bindir  string
	dir     string
	runas   []string
	Primary int // the primary's port
	Standby int // the standby's port
}

// pgBindir returns the directory of the PostgreSQL server binaries that
// scripts/pg.sh uses (version 15 first), or "".
func pgBindir() string {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	for _, d := range append([]string{"/usr/lib/postgresql/15/bin"}, dirs...) {
		ok := true
		for _, b := range []string{"initdb", "pg_ctl", "postgres", "pg_basebackup"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				ok = false
			}
		}
		if ok {
			return d
		}
	}
	return ""
}

// PostgresPair starts a primary and a standby streaming from it
// (asynchronously: synchronous_standby_names is empty) in a directory of
// their own, on free loopback ports, and stops and removes them when t
// ends. It runs the binaries scripts/pg.sh uses; as root, as the system
// user idem-pg (which scripts/pg.sh creates). Without the binaries, t is
// skipped, or failed under IDEM_REQUIRE_SERVERS. It takes a few seconds.
func PostgresPair(t testing.TB) *PgPair {
	t.Helper()
	p := &PgPair{t: t, bindir: pgBindir()}
	if p.bindir == "" {
		missing(t, "failover tests need the PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup): apt-get install postgresql (scripts/pg.sh installs it)")
	}
	p.makeDir()
	t.Cleanup(p.remove)
	p.run("initdb", "-D", p.data("primary"), "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
	p.Primary = p.start("primary")
	p.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p.Primary), "-U", "postgres",
		"-D", p.data("standby"), "-R", "-X", "stream", "--no-sync", "-c", "fast")
	p.Standby = p.start("standby")
	p.waitStreaming()
	return p
}

// missing skips t with msg, or fails it under IDEM_REQUIRE_SERVERS.
func missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv("IDEM_REQUIRE_SERVERS") != "" {
		t.Fatal(msg + " (IDEM_REQUIRE_SERVERS is set)")
	}
	t.Skip(msg)
}

// makeDir creates the pair's directory, owned by idem-pg when running as
// root (initdb refuses to run as root).
func (p *PgPair) makeDir() {
	dir, err := os.MkdirTemp("", "idem-pgpair-")
	if err != nil {
		p.t.Fatal(err)
	}
	p.dir = dir
	if os.Getuid() != 0 {
		return
	}
	u, err := user.Lookup("idem-pg")
	if err != nil {
		_ = os.RemoveAll(dir)
		missing(p.t, "failover tests as root run PostgreSQL as the system user idem-pg, which does not exist: "+
			"useradd --system --no-create-home --shell /usr/sbin/nologin idem-pg (scripts/pg.sh creates it)")
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		p.t.Fatal(err)
	}
	p.runas = []string{"runuser", "-u", "idem-pg", "--"}
}

func (p *PgPair) data(node string) string { return filepath.Join(p.dir, node) }

// run runs a PostgreSQL binary (as idem-pg under root) and fails t with
// its output when it fails.
func (p *PgPair) run(bin string, args ...string) {
	p.t.Helper()
	if err := p.exec(bin, args...); err != nil {
		p.t.Fatal(err)
	}
}

func (p *PgPair) exec(bin string, args ...string) error {
	argv := append(append(append([]string{}, p.runas...), filepath.Join(p.bindir, bin)), args...)
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", bin, strings.Join(args, " "), err, out)
	}
	return nil
}

// start starts node on a free port, trying another when the port was
// taken between the probe and the bind, and returns the port.
func (p *PgPair) start(node string) int {
	p.t.Helper()
	logf := filepath.Join(p.dir, node+".log")
	for range 5 {
		port := freePort(p.t)
		opts := fmt.Sprintf("-c listen_addresses=127.0.0.1 -p %d -k %s -c max_connections=100 -c fsync=on -c synchronous_commit=on -c wal_level=replica -c max_wal_senders=4 -c hot_standby=on", port, p.dir)
		err := p.exec("pg_ctl", "-D", p.data(node), "-l", logf, "-w", "-t", "30", "-o", opts, "start")
		if err == nil {
			return port
		}
		if log, _ := os.ReadFile(logf); !strings.Contains(string(log), "Address already in use") {
			p.t.Fatalf("%v\n%s", err, log)
		}
	}
	p.t.Fatalf("no free port for the %s after 5 tries", node)
	return 0
}

// freePort returns a loopback port that was free a moment ago.
func freePort(t testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitStreaming waits until the standby streams from the primary.
func (p *PgPair) waitStreaming() {
	p.t.Helper()
	p.poll(30*time.Second, "the standby streaming from the primary", func(c *pgx.Conn) (bool, error) {
		var n int
		err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'`).Scan(&n)
		return n > 0, err
	})
}

// poll runs cond on a connection to the primary until it holds, failing
// t after timeout.
func (p *PgPair) poll(timeout time.Duration, what string, cond func(*pgx.Conn) (bool, error)) {
	p.t.Helper()
	c := p.Conn(p.Primary)
	defer c.Close(context.Background())
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond(c)
		if err != nil {
			p.t.Fatal(err)
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("not %s after %s", what, timeout)
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
}

// URL returns the multi-host URL of the pair, primary first, with no
// target_session_attrs: the client picks.
func (p *PgPair) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable", p.Primary, p.Standby)
}

// NodeURL returns the URL of the node on port alone.
func (p *PgPair) NodeURL(port int) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
}

// Conn connects to the node on port; the caller closes it.
func (p *PgPair) Conn(port int) *pgx.Conn {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, p.NodeURL(port))
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

// Exec runs sql on the node on port.
func (p *PgPair) Exec(port int, sql string) {
	p.t.Helper()
	c := p.Conn(port)
	defer c.Close(context.Background())
	if _, err := c.Exec(context.Background(), sql); err != nil {
		p.t.Fatalf("%s on :%d: %v", sql, port, err)
	}
}

// FenceReadOnly turns the primary read-only in place, as an operator or a
// failover manager fencing it would: default_transaction_read_only on,
// reloaded. It returns once a new session is read-only, when the server
// has signalled the open ones. Those stay open; a session idle when the
// signal came applies it after its next command (PostgreSQL reloads its
// settings before it waits for a command, not while it waits), so that
// command may still write, and every transaction after it is read-only:
// writes fail with SQLSTATE 25006.
func (p *PgPair) FenceReadOnly() {
	p.t.Helper()
	p.Exec(p.Primary, `ALTER SYSTEM SET default_transaction_read_only = on`)
	p.Exec(p.Primary, `SELECT pg_reload_conf()`)
	p.poll(30*time.Second, "the fence in force", func(c *pgx.Conn) (bool, error) {
		var on string
		err := c.QueryRow(context.Background(), `SHOW default_transaction_read_only`).Scan(&on)
		return on == "on", err
	})
}

// SyncReplication makes the primary's commits wait for the standby
// (synchronous_standby_names = '*') and waits until the standby is
// synchronous: an acknowledged commit then survives the primary's loss.
func (p *PgPair) SyncReplication() {
	p.t.Helper()
	p.Exec(p.Primary, `ALTER SYSTEM SET synchronous_standby_names = '*'`)
	p.Exec(p.Primary, `SELECT pg_reload_conf()`)
	p.poll(30*time.Second, "the standby synchronous", func(c *pgx.Conn) (bool, error) {
		var n int
		err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_replication WHERE sync_state = 'sync'`).Scan(&n)
		return n > 0, err
	})
}

// CaughtUp waits until the standby has replayed all the WAL the primary
// wrote, as a failover manager does before it promotes in a switchover.
func (p *PgPair) CaughtUp() {
	p.t.Helper()
	p.poll(30*time.Second, "the standby caught up", func(c *pgx.Conn) (bool, error) {
		var ok bool
		err := c.QueryRow(context.Background(), `SELECT coalesce(bool_and(replay_lsn >= pg_current_wal_lsn()), false) FROM pg_stat_replication`).Scan(&ok)
		return ok, err
	})
}

// Promote promotes the standby to primary and waits until it accepts
// writes.
func (p *PgPair) Promote() {
	p.t.Helper()
	p.run("pg_ctl", "-D", p.data("standby"), "-w", "-t", "30", "promote")
}

// StopPrimary stops the primary at once, as a crash would (immediate
// shutdown): its sessions end.
func (p *PgPair) StopPrimary() {
	p.t.Helper()
	p.run("pg_ctl", "-D", p.data("primary"), "-m", "immediate", "-w", "stop")
}

// remove stops both servers, whatever their state, and removes their
// directory.
func (p *PgPair) remove() {
	for _, node := range []string{"standby", "primary"} {
		if _, err := os.Stat(filepath.Join(p.data(node), "postmaster.pid")); err == nil {
			_ = p.exec("pg_ctl", "-D", p.data(node), "-m", "immediate", "-w", "stop")
		}
	}
	_ = os.RemoveAll(p.dir)
}

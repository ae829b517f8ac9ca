package bench

import (
	"context"
	"crypto/sha256"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testenv"
)

func TestParseStat(t *testing.T) {
	// Fields after the command: state ppid pgrp session tty tpgid flags
	// minflt cminflt majflt cmajflt utime stime cutime cstime ...
	line := "4242 (postgres: a (b) c) S 17 4242 4242 0 -1 4194560 10 0 0 0 7 3 120 80 20 0 1 0 99 0 0\n"
	got, err := parseStat(line)
	if err != nil {
		t.Fatal(err)
	}
	want := procStat{comm: "postgres: a (b) c", ppid: 17, utime: 7, stime: 3, cutime: 120, cstime: 80}
	if got != want {
		t.Fatalf("parseStat = %+v, want %+v", got, want)
	}
	for _, bad := range []string{"", "4242 postgres S 1", "1 (x) S 1 2 3"} {
		if _, err := parseStat(bad); err == nil {
			t.Errorf("parseStat(%q) took a malformed line", bad)
		}
	}
}

// TestCPUMeterCountsServerAndClient burns CPU on a server backend that
// disconnects before the meter is read (its time must reach the
// postmaster's reaped-children total), and on the client, and checks both
// are counted.
func TestCPUMeterCountsServerAndClient(t *testing.T) {
	url := testenv.PostgresURL(t)
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	m, err := startCPU(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if m.postmaster == 0 {
		t.Fatalf("the server's CPU is not visible (%s); scripts/test runs PostgreSQL on this machine", m.why)
	}
	other, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := other.QueryRow(ctx, `SELECT count(*) FROM generate_series(1, 5000000) g WHERE g % 7 = 0`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	other.Close() // the backend exits: its time moves to the postmaster's cutime/cstime
	sum := sha256.Sum256(nil)
	for range 200000 {
		sum = sha256.Sum256(sum[:])
	}
	c := m.finish(1)
	t.Logf("%+v (n=%d, %x)", *c, n, sum[:2])
	if !strings.Contains(c.Server, "postmaster") {
		t.Fatalf("server CPU not measured: %s", c.Server)
	}
	// A scan of 5,000,000 rows takes far more than two clock ticks
	// (20 ms) of server CPU; a meter that missed the exited backend
	// would see about none.
	if c.ServerUs < 20_000 {
		t.Errorf("server CPU %.0f µs for a 5,000,000-row scan by a backend that exited", c.ServerUs)
	}
	if c.ClientUs <= 0 {
		t.Errorf("client CPU %.0f µs after 200,000 SHA-256 rounds", c.ClientUs)
	}
}

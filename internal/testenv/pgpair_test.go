package testenv

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// The pair replicates, a fence makes the primary refuse writes with
// SQLSTATE 25006 while its sessions stay open, and the promoted standby
// accepts them.
func TestPostgresPair(t *testing.T) {
	p := PostgresPair(t)
	ctx := context.Background()
	p.Exec(p.Primary, `CREATE TABLE t (v int); INSERT INTO t VALUES (1)`)
	open := p.Conn(p.Primary)
	defer open.Close(ctx)
	p.CaughtUp()
	var n int
	standby := p.Conn(p.Standby)
	defer standby.Close(ctx)
	if err := standby.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("standby: %d rows (%v), want 1", n, err)
	}
	p.FenceReadOnly()
	// The open session was idle when the fence came: its first command
	// may still write (FenceReadOnly), the second may not.
	var err error
	for range 2 {
		if _, err = open.Exec(ctx, `INSERT INTO t VALUES (2)`); err != nil {
			break
		}
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "25006" {
		t.Fatalf("second write on the fenced primary's open session: %v, want SQLSTATE 25006", err)
	}
	p.Promote()
	if _, err := standby.Exec(ctx, `INSERT INTO t VALUES (3)`); err != nil {
		t.Fatalf("write on the promoted standby: %v", err)
	}
	p.StopPrimary()
}

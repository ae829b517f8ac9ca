package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// A capped counter without a bucket has a row on PostgreSQL (the row an
// admission locks), which LimitUses does not list: SweepCounters keeps it
// while it has a live hold and while an admission locked it within Idle,
// and deletes it afterwards.
func TestSweepCountersDeletesIdleCapRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, pgstore.Config{})
	conn, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgstore.SearchPath(s.Schema())); err != nil {
		t.Fatal(err)
	}
	rows := func() int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM idem_limit_counters`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	sweep := func(idle time.Duration) int {
		t.Helper()
		r, err := s.SweepCounters(ctx, &store.CounterSweepParams{Idle: idle, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return r.Counters
	}
	lim := map[string]store.Limit{"cap": {Name: "cap", Concurrency: 1}}
	if err := s.DeclareLimits(ctx, []store.Limit{lim["cap"]}); err != nil {
		t.Fatal(err)
	}
	adm, err := s.Admit(ctx, &store.AdmitParams{Limits: lim, TTL: time.Hour, Requests: []store.AdmitRequest{
		{Holder: "h-1", Keys: []store.LimitKey{{Name: "cap", Key: "a"}}}, {Holder: "h-2", Keys: []store.LimitKey{{Name: "cap", Key: "b"}}}}})
	if err != nil || !adm[0].Admitted || !adm[1].Admitted {
		t.Fatalf("admit: got %+v, %v", adm, err)
	}
	if err := s.ReleaseHolds(ctx, []string{"h-2"}); err != nil {
		t.Fatal(err)
	}
	if n := sweep(time.Hour); n != 0 || rows() != 2 {
		t.Fatalf("sweep with Idle 1h just after the admissions: deleted %d, %d rows left; want 0 deleted, 2 left", n, rows())
	}
	if n := sweep(0); n != 1 || rows() != 1 {
		t.Fatalf("sweep with Idle 0: deleted %d, %d rows left; want b's row deleted and a's (a live hold) kept", n, rows())
	}
	adm, err = s.Admit(ctx, &store.AdmitParams{Limits: lim, TTL: time.Hour, Requests: []store.AdmitRequest{
		{Holder: "h-3", Keys: []store.LimitKey{{Name: "cap", Key: "a"}}}, {Holder: "h-4", Keys: []store.LimitKey{{Name: "cap", Key: "b"}}}}})
	if err != nil || adm[0].Admitted || !adm[1].Admitted {
		t.Fatalf("admit after the sweep: got %+v, %v; want a refused (its hold kept) and b admitted", adm, err)
	}
}

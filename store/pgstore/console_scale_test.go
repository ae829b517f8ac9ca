package pgstore_test

import (
	"context"
	"slices"
	"testing"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/readmodel"
)

func seedConsole(t *testing.T, s *pgstore.Store) {
	t.Helper()
	for _, q := range []string{
		`INSERT INTO idem_dead_letters (id, envelope, body, reason, error, saga_type, key, attempts, first_failed_at, last_failed_at)
SELECT 'd-' || lpad(g::text, 3, '0'), json_build_object('id', 'd-' || g, 'type', CASE WHEN g % 2 = 0 THEN 'a.Even' ELSE 'a.Odd' END),
  '\x00'::bytea, CASE WHEN g % 3 = 0 THEN 'malformed_body' ELSE 'retries_exhausted' END, 'e',
  'order', 'k-' || (g % 4), 1, now(), now() FROM generate_series(1, 120) g`,
		`INSERT INTO idem_timers (saga_type, key, name, due_at, envelope, body)
SELECT 'order', 'k-' || (g % 4), 't' || g, now() + make_interval(secs => 100 - g), '{"id":"x","type":"T"}', '\x00'::bytea
FROM generate_series(1, 40) g`,
		`INSERT INTO idem_instances (saga_type, key, state, data, schema_version, version, created_at, updated_at, finished_at)
SELECT CASE WHEN g % 3 = 0 THEN 'b' ELSE 'a' END, 'k-' || g, CASE WHEN g % 2 = 0 THEN 'Done' ELSE 'Open' END, '{}', 1, 1, now(), now(),
  CASE WHEN g % 2 = 0 THEN now() END FROM generate_series(1, 300) g`,
		`ANALYZE`,
	} {
		if _, err := s.Pool().Exec(context.Background(), q); err != nil {
			t.Fatal(err)
		}
	}
}

// Dead letters filtered, paged and counted in SQL must be exactly what
// filtering every row would give.
func TestConsoleScaleQueries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t, pgstore.Config{})
	seedConsole(t, s)

	var got []string
	q := &readmodel.DeadLetterQuery{SagaType: "order", Reason: "malformed_body", Key: "k-2", Limit: 3}
	for {
		ds, err := s.QueryDeadLetters(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) == 0 {
			break
		}
		for _, d := range ds {
			if d.Reason != q.Reason || d.Key != q.Key {
				t.Fatalf("dead letter %s (%s, %s) does not match the filter", d.ID, d.Reason, d.Key)
			}
			got = append(got, d.ID)
		}
		q.After = ds[len(ds)-1].ID
	}
	if len(got) != 10 || !slices.IsSorted(got) { // g % 3 == 0 and g % 4 == 2: g % 12 == 6 for g in 1..120
		t.Fatalf("got %d dead letters %v, want the 10 with g %% 12 == 6 in ID order", len(got), got)
	}
	counts, err := s.CountDeadLetters(ctx, &readmodel.DeadLetterQuery{Key: "k-0"})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]int{"malformed_body": 10, "retries_exhausted": 20}; !mapsEqual(counts.ByReason, want) {
		t.Fatalf("counts of key k-0 = %v, want %v", counts, want)
	}

	// Filters PostgreSQL cannot take as text match nothing, without an error.
	for _, hostile := range []string{"k\x00", "k\xff"} {
		if ds, err := s.QueryDeadLetters(ctx, &readmodel.DeadLetterQuery{Key: hostile, Reason: hostile}); err != nil || len(ds) != 0 {
			t.Errorf("QueryDeadLetters(key %q) = %d, %v; want none and no error", hostile, len(ds), err)
		}
		if c, err := s.CountDeadLetters(ctx, &readmodel.DeadLetterQuery{SagaType: hostile}); err != nil || len(c.ByReason) != 0 {
			t.Errorf("CountDeadLetters(type %q) = %v, %v; want none and no error", hostile, c, err)
		}
		if ts, err := s.TimersOf(ctx, store.Key{SagaType: "order", Key: hostile}); err != nil || len(ts) != 0 {
			t.Errorf("TimersOf(key %q) = %d, %v; want none and no error", hostile, len(ts), err)
		}
	}

	ts, err := s.TimersOf(ctx, store.Key{SagaType: "order", Key: "k-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 10 || !slices.IsSortedFunc(ts, func(a, b store.Timer) int { return a.DueAt.Compare(b.DueAt) }) {
		t.Fatalf("got %d timers of order/k-1, want 10 in due order", len(ts))
	}
	for _, tm := range ts {
		if tm.Key != "k-1" {
			t.Fatalf("timer of %s among those of k-1", tm.Key)
		}
	}

	exact, err := s.CountInstances(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	est, isExact, err := s.EstimateInstanceCounts(ctx)
	if err != nil || !isExact || !slices.Equal(est, exact) {
		t.Fatalf("below ExactCountBelow: %v exact=%v err=%v, want the exact counts %v", est, isExact, err, exact)
	}
	// ANALYZE reads every row of a small table, so its frequencies are exact.
	stats, err := pgstore.StatsCounts(s, ctx, 300)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stats, exact) {
		t.Fatalf("counts from the statistics %v, want %v", stats, exact)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

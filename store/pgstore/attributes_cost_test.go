package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// attributeTriggerCalls runs stmts (the instance writes of a unit of work,
// then any further SQL) in a transaction that it rolls back, and returns
// how many times the functions of the attribute triggers ran in it
// (pg_stat_xact_user_functions, with track_functions on for the
// transaction: the test server's role is a superuser). The view holds the
// backend's calls not yet flushed to the statistics, which may include an
// earlier transaction's: the difference of two readings is this one's.
func attributeTriggerCalls(t *testing.T, s *pgstore.Store, inserts, updates []*store.Instance, then ...string) int64 {
	t.Helper()
	ctx := context.Background()
	tx, err := s.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `SET LOCAL track_functions = 'pl'`); err != nil {
		t.Fatalf("track functions: %v", err)
	}
	calls := func() int64 {
		t.Helper()
		var n int64
		err := tx.QueryRow(ctx, `SELECT coalesce(sum(calls), 0)::bigint FROM pg_stat_xact_user_functions
WHERE schemaname = $1 AND funcname LIKE 'idem\_attribute%'`, s.Schema()).Scan(&n)
		if err != nil {
			t.Fatalf("read function calls: %v", err)
		}
		return n
	}
	before := calls()
	b := &pgx.Batch{}
	if err := pgstore.QueueInstanceWrites(b, inserts, updates); err != nil {
		t.Fatal(err)
	}
	for _, sql := range then {
		b.Queue(sql)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		t.Fatalf("write instances: %v", err)
	}
	return calls() - before
}

// A user who declares no saga attributes pays nothing for them: writing,
// updating and deleting instances without attributes runs no attribute
// trigger (issue 24), and neither does an update that leaves an instance's
// attributes as they were. Writing attributes still runs them (the
// conformance suite's Attributes cases check what they write).
func TestAttributeTriggersRunOnlyForAttributes(t *testing.T) {
	t.Parallel()
	s := openStore(t, pgstore.Config{})
	at := time.Now().UTC().Truncate(time.Microsecond)
	instance := func(k string, version int64, attrs map[string]string) *store.Instance {
		return &store.Instance{SagaType: "order", Key: k, State: "Open", Data: []byte(`{}`), Version: version,
			CreatedAt: at, UpdatedAt: at, Attributes: attrs}
	}
	seed := func(ins ...*store.Instance) {
		t.Helper()
		uow, err := s.Begin(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer uow.Rollback(context.Background())
		if err := uow.Commit(context.Background(), &store.Changes{Inserts: ins}); err != nil {
			t.Fatalf("seed: %v", err)
		}
	}
	seed(instance("plain", 1, nil), instance("tagged", 1, map[string]string{"supplier": "acme"}))
	const deletePlain = `DELETE FROM idem_instances WHERE key = 'plain'`

	if n := attributeTriggerCalls(t, s,
		[]*store.Instance{instance("new-1", 1, nil), instance("new-2", 1, nil)},
		[]*store.Instance{instance("plain", 1, nil)}, deletePlain); n != 0 {
		t.Errorf("insert, update and delete of instances without attributes: attribute triggers ran %d times, want 0", n)
	}
	if n := attributeTriggerCalls(t, s, nil,
		[]*store.Instance{instance("tagged", 1, map[string]string{"supplier": "acme"})}); n != 0 {
		t.Errorf("update that keeps the attributes: attribute triggers ran %d times, want 0", n)
	}
	if n := attributeTriggerCalls(t, s,
		[]*store.Instance{instance("new-3", 1, map[string]string{"supplier": "globex"})},
		[]*store.Instance{instance("tagged", 1, map[string]string{"supplier": "initech"})}); n == 0 {
		t.Error("insert and update that write attributes: attribute triggers never ran, want them to")
	}
}

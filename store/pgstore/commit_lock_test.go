package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// A commit that meets a row lock another transaction holds on its saga
// fails at once with store.ErrConflict instead of waiting for it: once the
// holder commits, the version check fails anyway, so the wait only queued
// replicas behind one another, and behind PostgreSQL's deadlock detection
// (a second) when two units of work locked their sagas in other orders
// (idem bench --replicas, docs/scaling.md). The engine re-applies the unit
// of work, which then goes through once the lock is released.
func TestCommitMeetingAHeldRowLockConflicts(t *testing.T) {
	t.Parallel()
	st := openStore(t, pgstore.Config{})
	ctx := context.Background()
	k := store.Key{SagaType: "order", Key: "k-1"}
	now := time.Now().UTC().Truncate(time.Microsecond)
	in := &store.Instance{SagaType: k.SagaType, Key: k.Key, State: "Open", Data: []byte(`{}`), Version: 1, CreatedAt: now, UpdatedAt: now}
	commitChanges(t, st, &store.Changes{Inserts: []*store.Instance{in}})

	holder := schemaConn(t, st.Schema())
	if _, err := holder.Exec(ctx, `BEGIN; UPDATE idem_instances SET updated_at = now() WHERE key = 'k-1'`); err != nil {
		t.Fatal(err)
	}
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := uow.Load(ctx, &store.LoadParams{Keys: []store.Key{k}}); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second) // a bound for the test only: the commit must not wait for the holder at all
	defer cancel()
	if err := uow.Commit(cctx, update(in, "Paid", "m-1", now)); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("commit on a saga whose row another transaction holds: got %v, want store.ErrConflict", err)
	}
	if _, err := holder.Exec(ctx, `ROLLBACK`); err != nil {
		t.Fatal(err)
	}
	commitChanges(t, st, update(in, "Paid", "m-1", now)) // re-applied once the lock is gone
	var state string
	if err := holder.QueryRow(ctx, `SELECT state FROM idem_instances WHERE key = 'k-1'`).Scan(&state); err != nil || state != "Paid" {
		t.Errorf("saga after the re-applied commit: state %q (%v), want Paid", state, err)
	}
}

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

// MigrateStates passes over a saga that a transaction in flight holds
// rather than wait for it: waiting in key order while a unit of work locks
// its batch in message order deadlocked the two (CI, stop 38:
// TestEagerMigrationRacesTheEngine). The held saga stays for a later call,
// or for the unit of work holding it, which migrates it on load.
func TestMigrateStatesSkipsSagasHeldByACommit(t *testing.T) {
	cfg := pgstore.Config{}
	st := openStore(t, cfg)
	ctx := t.Context()
	t0 := time.Now().UTC().Truncate(time.Millisecond)
	var ins []*store.Instance
	for _, k := range []string{"o-1", "o-2", "o-3"} {
		ins = append(ins, &store.Instance{SagaType: "order", Key: k, State: "Packing", Version: 1, Data: []byte(`{}`), CreatedAt: t0, UpdatedAt: t0})
	}
	uow, err := st.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := uow.Commit(ctx, &store.Changes{Inserts: ins}); err != nil {
		t.Fatal(err)
	}

	conn, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	hold := `UPDATE ` + pgx.Identifier{st.Schema(), "idem_instances"}.Sanitize() + ` SET updated_at = updated_at WHERE saga_type = 'order' AND key = 'o-2'`
	if _, err := tx.Exec(ctx, hold); err != nil {
		t.Fatal(err)
	}

	// Bounded only so that a regression fails rather than hangs: the call
	// must not wait for tx at all.
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	p := &store.MigrateStatesParams{SagaType: "order", From: "Packing", To: "Shipped", Limit: 10, At: t0, EventType: "idem.StateMigrated"}
	n, err := st.MigrateStates(callCtx, p)
	if err != nil {
		t.Fatalf("MigrateStates beside a transaction holding o-2: %v (want it to pass over o-2, not wait)", err)
	}
	if n != 2 {
		t.Fatalf("MigrateStates moved %d, want 2 (o-1 and o-3; o-2 is held)", n)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err = st.MigrateStates(ctx, p); err != nil || n != 1 {
		t.Fatalf("MigrateStates once o-2 is free: moved %d, %v; want 1, nil", n, err)
	}
	if left, err := st.CountState(ctx, "order", "Packing"); err != nil || left != 0 {
		t.Fatalf("left in Packing: %d, %v; want 0", left, err)
	}
}

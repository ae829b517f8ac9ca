package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/store/storetest"
)

// dropUpdatedIndex drops migration 018's index, as docs/benchmarks.md
// tells an operator who does not want every instance write to pay it.
func dropUpdatedIndex(t *testing.T, s *pgstore.Store) {
	t.Helper()
	sql := "DROP INDEX CONCURRENTLY " + pgx.Identifier{s.Schema(), "idem_instances_type_updated"}.Sanitize()
	if _, err := s.Pool().Exec(context.Background(), sql); err != nil {
		t.Fatalf("drop the updated_at index: %v", err)
	}
}

// TestInstanceQuerierWithoutUpdatedIndex: the "updated between" filter
// and every other query answer the same without the index (they scan),
// so dropping it is an operator's choice the store supports. The whole
// suite runs (storetest.Run has one entry point); its InstanceQuerier
// cases are the ones the index serves.
func TestInstanceQuerierWithoutUpdatedIndex(t *testing.T) {
	testenv.PostgresURL(t)
	storetest.Run(t, conformance(), func(t *testing.T) store.Store {
		s := openStore(t, pgstore.Config{Lease: conformanceLease, PollInterval: 100 * time.Millisecond})
		dropUpdatedIndex(t, s)
		return s
	})
}

// TestMigrateKeepsTheUpdatedIndexDropped: migrating a store whose
// operator dropped the index does not build it again.
func TestMigrateKeepsTheUpdatedIndexDropped(t *testing.T) {
	url := testenv.PostgresURL(t)
	s := openStore(t, pgstore.Config{})
	dropUpdatedIndex(t, s)
	ctx := context.Background()
	again, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: s.Schema(), Migrate: true})
	if err != nil {
		t.Fatalf("open and migrate again: %v", err)
	}
	defer again.Close()
	var n int
	err = again.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = $1 AND indexname = 'idem_instances_type_updated'`, s.Schema()).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("migrating again built idem_instances_type_updated again")
	}
}

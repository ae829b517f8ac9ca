package pgstore_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// instanceIndexes returns the names of the valid indexes of idem_instances
// in s's schema, sorted.
func instanceIndexes(t *testing.T, s *pgstore.Store) []string {
	t.Helper()
	rows, err := s.Pool().Query(context.Background(), `
SELECT c.relname::text FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_class r ON r.oid = i.indrelid
JOIN pg_namespace n ON n.oid = r.relnamespace
WHERE n.nspname = $1 AND r.relname = 'idem_instances' AND i.indisvalid
ORDER BY 1`, s.Schema())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		names = append(names, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return names
}

// An engine whose instances nobody lists writes no index that only those
// lists use (issue 24): the engine's writes maintain the primary key and
// the sweeper's index only. The first operator's read of instances (the
// console, the admin API, idem sagas ls) builds the indexes that serve
// such reads, in the background, and they serve every read after it.
func TestReadIndexesBuiltOnFirstRead(t *testing.T) {
	t.Parallel()
	engineOnly := []string{"idem_instances_finished", "idem_instances_pkey"}
	all := []string{"idem_instances_finished", "idem_instances_keyset", "idem_instances_pkey", "idem_instances_stuck", "idem_instances_type_state"}
	reads := map[string]func(context.Context, *pgstore.Store) error{
		"ListInstances": func(ctx context.Context, s *pgstore.Store) error {
			_, err := s.ListInstances(ctx, &store.ListParams{Limit: 1})
			return err
		},
		"QueryInstances": func(ctx context.Context, s *pgstore.Store) error {
			_, err := s.QueryInstances(ctx, &store.InstanceQuery{Stuck: true, Limit: 1})
			return err
		},
		"CountInstances": func(ctx context.Context, s *pgstore.Store) error {
			_, err := s.CountInstances(ctx, "")
			return err
		},
	}
	for name, read := range reads {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := openStore(t, pgstore.Config{})
			if got := instanceIndexes(t, s); !slices.Equal(got, engineOnly) {
				t.Fatalf("indexes of idem_instances before any read: got %v, want %v", got, engineOnly)
			}
			if err := read(context.Background(), s); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			deadline := time.Now().Add(2 * time.Minute) // the build waits for older transactions on a shared server
			for got := instanceIndexes(t, s); !slices.Equal(got, all); got = instanceIndexes(t, s) {
				if time.Now().After(deadline) {
					t.Fatalf("indexes of idem_instances after %s: got %v, want %v", name, got, all)
				}
				time.Sleep(20 * time.Millisecond) // polling a condition, not synchronising
			}
		})
	}
}

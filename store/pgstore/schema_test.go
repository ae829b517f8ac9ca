package pgstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// openSchema opens a store on schema, migrated, and drops the schema when
// the test ends.
func openSchema(t *testing.T, schema string) *pgstore.Store {
	t.Helper()
	url := testenv.PostgresURL(t)
	ctx := context.Background()
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	s, err := pgstore.Open(ctx, url, &pgstore.Config{Schema: schema, Migrate: true, MaxConns: 4, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatalf("open schema %s: %v", schema, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// Two deployments whose schema names differ only in case are two tenants:
// PostgreSQL folds unquoted names to lower case, so every use of the name
// must be quoted, or one reads and writes the other's tables.
func TestSchemasDifferingInCaseAreIsolated(t *testing.T) {
	t.Parallel()
	suffix := randHex()
	lower := openSchema(t, "tenant_x_"+suffix)
	mixed := openSchema(t, "Tenant_X_"+suffix)
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Microsecond)

	insert := func(s *pgstore.Store, key, state string) {
		t.Helper()
		uow, err := s.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer uow.Rollback(ctx)
		err = uow.Commit(ctx, &store.Changes{Inserts: []*store.Instance{{
			SagaType: "order", Key: key, State: state, Data: []byte(`{}`), Version: 1, CreatedAt: at, UpdatedAt: at,
		}}})
		if err != nil {
			t.Fatalf("insert order/%s into schema %s: %v", key, s.Schema(), err)
		}
	}
	list := func(s *pgstore.Store) []string {
		t.Helper()
		ins, err := s.ListInstances(ctx, &store.ListParams{Limit: 10})
		if err != nil {
			t.Fatalf("list instances of schema %s: %v", s.Schema(), err)
		}
		var out []string
		for _, in := range ins {
			out = append(out, in.Key+"="+in.State)
		}
		return out
	}
	insert(mixed, "shared", "Mixed")
	insert(lower, "shared", "Lower") // a conflict if the tables were shared
	insert(mixed, "only-mixed", "Mixed")
	if got, want := strings.Join(list(mixed), " "), "only-mixed=Mixed shared=Mixed"; got != want {
		t.Errorf("sagas of schema %s: got %s, want %s", mixed.Schema(), got, want)
	}
	if got, want := strings.Join(list(lower), " "), "shared=Lower"; got != want {
		t.Errorf("sagas of schema %s: got %s, want %s", lower.Schema(), got, want)
	}

	// Each schema holds its own tables and migration record.
	conn := schemaConn(t, "public")
	for _, s := range []*pgstore.Store{lower, mixed} {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = $1 AND table_name = 'idem_migrations'`, s.Schema()).Scan(&n)
		if err != nil || n != 1 {
			t.Errorf("schema %q: idem_migrations tables: got %d, %v; want 1", s.Schema(), n, err)
		}
	}

	// The queues are separate too: a message published to one is not
	// handed out by the other, and wakes only its own receivers.
	if err := mixed.Publish(ctx, []transport.Envelope{{ID: "m-1", Type: "t", CorrelationID: "k"}}); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	ds, err := lower.Receive(rctx, 10)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("receive from schema %s after a publish to %s: got %d deliveries, %v; want none", lower.Schema(), mixed.Schema(), len(ds), err)
	}
	rctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	ds, err = mixed.Receive(rctx, 10)
	cancel()
	if err != nil || len(ds) != 1 || ds[0].Envelope.ID != "m-1" {
		t.Fatalf("receive from schema %s: got %+v, %v; want m-1", mixed.Schema(), ds, err)
	}
	if err := mixed.Ack(ctx, ds); err != nil {
		t.Fatal(err)
	}
}

// A pool made outside pgstore whose search_path does not name the schema
// (here the unquoted, case-folded form) is refused: the store would use
// another schema's tables.
func TestNewRefusesPoolOnAnotherSchema(t *testing.T) {
	t.Parallel()
	suffix := randHex()
	openSchema(t, "tenant_y_"+suffix)
	mixed := "Tenant_Y_" + suffix
	openSchema(t, mixed)
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["search_path"] = mixed // folds to tenant_y_…
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	_, err = pgstore.New(ctx, pool, &pgstore.Config{Schema: mixed})
	if err == nil || !strings.Contains(err.Error(), "search_path") {
		t.Fatalf("New on a pool whose search_path folds %q to lower case: got %v, want an error about search_path", mixed, err)
	}

	pc.ConnConfig.RuntimeParams["search_path"] = pgstore.SearchPath(mixed)
	good, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	s, err := pgstore.New(ctx, good, &pgstore.Config{Schema: mixed})
	if err != nil {
		t.Fatalf("New on a pool with search_path %s: %v", pgstore.SearchPath(mixed), err)
	}
	s.Close()
}

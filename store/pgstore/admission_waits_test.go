package pgstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemhq/idem/internal/testenv"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// A message refused receive after receive has its refusal written once:
// the second refusal finds the same record on the row and leaves the row
// alone (its xmin, the transaction that wrote it, stays that of the first).
func TestRefusalWrittenOnce(t *testing.T) {
	t.Parallel()
	s := openStore(t, pgstore.Config{Lease: time.Minute, PollInterval: 50 * time.Millisecond})
	ctx := context.Background()
	api := []store.LimitKey{{Name: "api"}}
	p := &store.ReceiveParams{Max: 10, Limits: map[string]store.Limit{"api": {Name: "api", Concurrency: 1}},
		Needs: func(*transport.Envelope) []store.LimitKey { return api }}
	envs := []transport.Envelope{{ID: "m-1", Type: "t", CorrelationID: "k-1"}, {ID: "m-2", Type: "t", CorrelationID: "k-2"}}
	if err := s.Publish(ctx, envs); err != nil {
		t.Fatal(err)
	}
	if ds, err := s.ReceiveAdmitted(ctx, p); err != nil || len(ds) != 1 || ds[0].Envelope.ID != "m-1" {
		t.Fatalf("first receive: got %d deliveries, error %v; want m-1", len(ds), err)
	}
	conn, err := pgx.Connect(ctx, testenv.PostgresURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(ctx) })
	if _, err := conn.Exec(ctx, "SET search_path TO "+pgstore.SearchPath(s.Schema())); err != nil {
		t.Fatal(err)
	}
	row := func() (name, xmin string) {
		t.Helper()
		if err := conn.QueryRow(ctx, `SELECT coalesce(refused_name, ''), xmin::text FROM idem_queue WHERE id = 'm-2'`).Scan(&name, &xmin); err != nil {
			t.Fatal(err)
		}
		return name, xmin
	}
	name, first := row()
	if name != "api" {
		t.Fatalf("m-2 after a refusal: refused_name %q, want api", name)
	}
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if ds, err := s.ReceiveAdmitted(rctx, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second receive at the cap: got %d deliveries, error %v; want none until the deadline", len(ds), err)
	}
	if _, again := row(); again != first {
		t.Errorf("m-2 refused again: xmin %s, want %s (the same refusal written again)", again, first)
	}
}

package sqlitestore_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

// A message refused receive after receive has its refusal written once:
// a trigger counts the writes of the refusal columns, and the second
// refusal, finding the same record on the row, writes none.
func TestRefusalWrittenOnce(t *testing.T) {
	t.Parallel()
	s := openStore(t, sqlitestore.Config{Lease: time.Minute, PollInterval: 50 * time.Millisecond})
	ctx := context.Background()
	db := rawDB(t, s.Path())
	if _, err := db.ExecContext(ctx, `CREATE TABLE refusal_writes (seq INTEGER);
CREATE TRIGGER count_refusal_writes AFTER UPDATE OF refused_name, refused_key, refused_attempt ON idem_queue
BEGIN INSERT INTO refusal_writes VALUES (new.seq); END`); err != nil {
		t.Fatal(err)
	}
	writes := func() int {
		t.Helper()
		var n int
		if err := db.QueryRowContext(ctx, `SELECT count(*) FROM refusal_writes`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	api := []store.LimitKey{{Name: "api"}}
	p := &store.ReceiveParams{Max: 10, Limits: map[string]store.Limit{"api": {Name: "api", Concurrency: 1}},
		Needs: func(*transport.Envelope) []store.LimitKey { return api }}
	if err := s.Publish(ctx, []transport.Envelope{{ID: "m-1", Type: "t", CorrelationID: "k-1"}, {ID: "m-2", Type: "t", CorrelationID: "k-2"}}); err != nil {
		t.Fatal(err)
	}
	if ds, err := s.ReceiveAdmitted(ctx, p); err != nil || len(ds) != 1 || ds[0].Envelope.ID != "m-1" {
		t.Fatalf("first receive: got %d deliveries, error %v; want m-1", len(ds), err)
	}
	if n := writes(); n != 1 {
		t.Fatalf("refusal writes after the first receive: got %d, want 1 (m-2)", n)
	}
	rctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if ds, err := s.ReceiveAdmitted(rctx, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second receive at the cap: got %d deliveries, error %v; want none until the deadline", len(ds), err)
	}
	if n := writes(); n != 1 {
		t.Errorf("refusal writes after refusing m-2 again: got %d, want still 1", n)
	}
}

// collidingKeys returns two saga keys whose partition hashes are equal.
func collidingKeys(t *testing.T) (string, string) {
	t.Helper()
	seen := map[uint32]string{}
	for i := range 1 << 20 {
		k := fmt.Sprintf("key-%d", i)
		h := transport.PartitionHash(k)
		if o, ok := seen[h]; ok {
			return o, k
		}
		seen[h] = k
	}
	t.Fatal("no two of 2^20 keys share a partition hash")
	return "", ""
}

// AdmissionWaitsOf finds a key's rows by the hash of its partition key,
// which another key may share: each key gets its own waits only.
func TestAdmissionWaitsOfCollidingKeys(t *testing.T) {
	t.Parallel()
	s := openStore(t, sqlitestore.Config{Lease: time.Minute, PollInterval: 50 * time.Millisecond})
	ctx := context.Background()
	a, b := collidingKeys(t)
	api := []store.LimitKey{{Name: "api"}}
	p := &store.ReceiveParams{Max: 10, Limits: map[string]store.Limit{"api": {Name: "api", Concurrency: 1}},
		Needs: func(*transport.Envelope) []store.LimitKey { return api }}
	if err := s.Publish(ctx, []transport.Envelope{{ID: "m-0", Type: "t", CorrelationID: "z"}, {ID: "m-a", Type: "t", CorrelationID: a}, {ID: "m-b", Type: "t", CorrelationID: b}}); err != nil {
		t.Fatal(err)
	}
	if ds, err := s.ReceiveAdmitted(ctx, p); err != nil || len(ds) != 1 || ds[0].Envelope.ID != "m-0" {
		t.Fatalf("receive: got %d deliveries, error %v; want m-0, the others refused", len(ds), err)
	}
	for key, want := range map[string]string{a: "m-a", b: "m-b"} {
		ws, err := s.AdmissionWaitsOf(ctx, key)
		if err != nil || len(ws) != 1 || ws[0].MessageID != want {
			t.Errorf("admission waits of %q (its hash shared): got %+v, %v, want %s only", key, ws, err, want)
		}
	}
}

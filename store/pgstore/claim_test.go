package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// A unit of work that claimed and then went silent (its host or network
// gone) must not hold the messages until TCP keepalives notice: the server
// ends its session after Config.Lease idle in the transaction, the
// messages come back, and the silent unit of work can no longer commit.
func TestClaimOfASilentUnitOfWorkEndsAfterTheLease(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	st := openStore(t, pgstore.Config{Lease: lease, PollInterval: 100 * time.Millisecond})
	ctx := context.Background()
	env := transport.Envelope{ID: "m-1", Type: "test.Ping", CorrelationID: "k-1", Body: []byte(`{}`)}
	if err := st.Publish(ctx, []transport.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	silent := claimUnitOf(t, st)
	ds, err := silent.Claim(ctx, 10, 0, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: got %d deliveries, error %v; want m-1", len(ds), err)
	}

	deadline := time.Now().Add(20 * lease)
	for {
		u := claimUnitOf(t, st)
		again, err := u.Claim(ctx, 10, 0, 1)
		_ = u.Rollback(ctx)
		if err != nil {
			t.Fatalf("claim by another unit of work: %v", err)
		}
		if len(again) == 1 && again[0].Envelope.ID == "m-1" && again[0].Attempt == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("m-1 still held %v after a silent unit of work claimed it (lease %v): got %d deliveries", 20*lease, lease, len(again))
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
	if err := silent.Consume(ctx, ds); err != nil {
		t.Fatal(err)
	}
	if err := silent.Commit(ctx, &store.Changes{}); err == nil {
		t.Fatal("commit of the unit of work whose session was ended: got nil, want an error (m-1 is claimable again)")
	}
}

func claimUnitOf(t *testing.T, st *pgstore.Store) store.ClaimUnitOfWork {
	t.Helper()
	u, err := st.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Rollback(context.Background()) })
	return u.(store.ClaimUnitOfWork)
}

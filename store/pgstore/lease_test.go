package pgstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// A delivery returned by a unit of work that claimed it is settled: an
// extension of its lease afterwards is ignored and keeps the Return's
// delay, as after a Nack (transporttest's ExtendAfterNackKeepsDelay).
func TestExtendAfterClaimReturnKeepsDelay(t *testing.T) {
	t.Parallel()
	const lease = 300 * time.Millisecond
	st := openStore(t, pgstore.Config{Lease: lease, PollInterval: 50 * time.Millisecond})
	ctx := context.Background()
	env := transport.Envelope{ID: "m-1", Type: "test.Ping", CorrelationID: "k-1", Body: []byte(`{}`)}
	if err := st.Publish(ctx, []transport.Envelope{env}); err != nil {
		t.Fatal(err)
	}
	u := claimUnitOf(t, st)
	ds, err := u.Claim(ctx, 10, 0, 1)
	if err != nil || len(ds) != 1 {
		t.Fatalf("claim: got %d deliveries, error %v; want m-1", len(ds), err)
	}
	const delay = 10 * lease
	start := time.Now()
	if err := u.Return(ctx, ds[0], delay); err != nil {
		t.Fatal(err)
	}
	if err := u.Commit(ctx, &store.Changes{}); err != nil {
		t.Fatal(err)
	}
	if err := st.ExtendLeases(ctx, ds); err != nil {
		t.Errorf("ExtendLeases after the claim's Return: %v, want nil (the delivery is settled)", err)
	}
	var left time.Duration
	if err := st.Pool().QueryRow(ctx, `SELECT extract(epoch FROM visible_at - now())::float8 * interval '1 second' FROM idem_queue`).Scan(&left); err != nil {
		t.Fatal(err)
	}
	if want := delay - time.Since(start) - lease; left < want {
		t.Errorf("m-1 visible in %v after a Return with delay %v and an extension: the extension replaced the delay", left, delay)
	}
}

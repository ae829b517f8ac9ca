package pgstore_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// Renewals and the commit of a unit of work that consumes the same queue
// rows must not deadlock: the commit deletes the rows in its batch's
// order, while the engine renews them in any order (its renewal keeps
// them in a map). Each round runs one commit of n rows in seq order
// against extensions of the same rows in the reverse order, until the
// commit ends; PostgreSQL breaks a deadlock by failing one of them with
// SQLSTATE 40P01.
func TestExtendLeasesDoesNotDeadlockWithCommit(t *testing.T) {
	t.Parallel()
	const n, rounds = 300, 8
	st := openStore(t, pgstore.Config{Lease: time.Minute, PollInterval: 50 * time.Millisecond})
	ctx := context.Background()
	for round := range rounds {
		envs := make([]transport.Envelope, n)
		for i := range envs {
			envs[i] = transport.Envelope{ID: fmt.Sprintf("m-%d-%d", round, i), Type: "test.Ping", CorrelationID: fmt.Sprintf("k-%d", i), Body: []byte(`{}`)}
		}
		if err := st.Publish(ctx, envs); err != nil {
			t.Fatal(err)
		}
		ds := receiveAll(t, st, n)
		reversed := slices.Clone(ds)
		slices.Reverse(reversed)

		done := make(chan error, 1)
		go func() { done <- commitConsuming(ctx, st, ds) }()
		var extErr error
		var commitErr error
	renew:
		for {
			select {
			case commitErr = <-done:
				break renew
			default:
			}
			if err := st.ExtendLeases(ctx, reversed); err != nil && extErr == nil {
				extErr = err
			}
		}
		if commitErr != nil || extErr != nil {
			t.Fatalf("round %d: renewals of %d rows in reverse order beside a commit consuming them: commit: %v; extension: %v", round, n, commitErr, extErr)
		}
	}
}

// receiveAll receives n deliveries from st.
func receiveAll(t *testing.T, st *pgstore.Store, n int) []transport.Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var ds []transport.Delivery
	for len(ds) < n {
		got, err := st.Receive(ctx, n-len(ds))
		if err != nil {
			t.Fatalf("receive: %v (got %d of %d)", err, len(ds), n)
		}
		ds = append(ds, got...)
	}
	slices.SortFunc(ds, func(a, b transport.Delivery) int { return cmp.Compare(seqOf(t, a), seqOf(t, b)) })
	return ds
}

// seqOf is the queue row of d, from its token.
func seqOf(t *testing.T, d transport.Delivery) int64 {
	t.Helper()
	a, _, _ := strings.Cut(d.Token, ":")
	seq, err := strconv.ParseInt(a, 10, 64)
	if err != nil {
		t.Fatalf("token %q of %s: %v", d.Token, d.Envelope.ID, err)
	}
	return seq
}

// commitConsuming consumes ds in a unit of work of st and commits it.
func commitConsuming(ctx context.Context, st *pgstore.Store, ds []transport.Delivery) error {
	u, err := st.Begin(ctx)
	if err != nil {
		return err
	}
	if err := u.(store.QueueUnitOfWork).Consume(ctx, ds); err != nil {
		_ = u.Rollback(ctx)
		return err
	}
	return u.Commit(ctx, &store.Changes{})
}

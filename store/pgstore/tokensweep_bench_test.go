package pgstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport"
)

// BenchmarkTokenSweepKept measures one sweep pass (batches of 1,000 until
// none is left) over 10,000 sweepable tokens minted after 100,000 kept
// ones: tokens whose message has a dead letter, which a sweep reads and
// keeps. One op is one pass.
func BenchmarkTokenSweepKept(b *testing.B) {
	const kept, sweepable, batch = 100_000, 10_000, 1000
	st := openStore(b, pgstore.Config{})
	ctx := context.Background()
	at := time.Now().UTC().Add(-48 * time.Hour)
	for lo := 0; lo < kept; lo += 10_000 {
		var ch store.Changes
		for i := lo; i < lo+10_000; i++ {
			id := "m-kept-" + strconv.Itoa(i)
			ch.MintTokens = append(ch.MintTokens, store.Token{ID: "orders.Placed" + store.TokenSep + id, MintedAt: at.Add(time.Duration(i) * time.Millisecond)})
			ch.DeadLetters = append(ch.DeadLetters, store.DeadLetter{ID: id, Envelope: transport.Envelope{ID: id, Type: "orders.Placed", Body: []byte(`{}`)},
				Reason: "permanent_error", Error: "boom", Attempts: 1, FirstFailedAt: at, LastFailedAt: at})
		}
		benchCommit(b, st, &ch)
	}
	p := &store.StaleTokens{MintedBefore: time.Now().UTC().Add(-time.Hour), Limit: batch}
	b.ResetTimer()
	for n := range b.N {
		b.StopTimer()
		var ch store.Changes
		for i := range sweepable {
			ch.MintTokens = append(ch.MintTokens, store.Token{ID: "orders.Placed" + store.TokenSep + "m-lost-" + strconv.Itoa(n) + "-" + strconv.Itoa(i), MintedAt: at.Add(time.Hour + time.Duration(i)*time.Millisecond)})
		}
		benchCommit(b, st, &ch)
		b.StartTimer()
		deleted := sweepPass(ctx, b, st, p)
		if deleted != sweepable {
			b.Fatalf("pass %d deleted %d tokens, want %d", n, deleted, sweepable)
		}
	}
}

func benchCommit(b *testing.B, st *pgstore.Store, ch *store.Changes) {
	b.Helper()
	ctx := context.Background()
	uow, err := st.Begin(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if err := uow.Commit(ctx, ch); err != nil {
		b.Fatal(err)
	}
}

// sweepPass sweeps in batches, each after the previous one, as the
// engine's sweeper does, and returns how many tokens it deleted.
func sweepPass(ctx context.Context, b *testing.B, st *pgstore.Store, p *store.StaleTokens) int {
	b.Helper()
	total := 0
	q := *p
	for {
		r, err := st.SweepTokens(ctx, &q)
		if err != nil {
			b.Fatal(err)
		}
		total += r.Deleted
		if r.Next == nil {
			return total
		}
		q.After = r.Next
	}
}

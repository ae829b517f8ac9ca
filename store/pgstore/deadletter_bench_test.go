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

// BenchmarkDeadLetterWrites measures the writes that keep a dead letter's
// state (migration 17's triggers): "record" commits one new dead letter;
// "record-again" records one of 1,000 again, as a message that fails
// again does; "replay" begins a replay of one of 1,000 and settles it
// succeeded, as a console replay and the engine that applies the copy do.
// Run on the previous version's code for the cost the triggers add.
func BenchmarkDeadLetterWrites(b *testing.B) {
	at := time.Now().UTC()
	letter := func(i int) store.DeadLetter {
		id := "dl-" + strconv.Itoa(i)
		return store.DeadLetter{ID: id, Envelope: transport.Envelope{ID: id, Type: "orders.Shipped", Headers: map[string]string{"x-trace": "t"}, Body: []byte(`{"OrderID":"o-1"}`)},
			Reason: "permanent_error", Error: "the handler said no", SagaType: "order",
			Key: "k-" + strconv.Itoa(i), Attempts: 1, FirstFailedAt: at, LastFailedAt: at}
	}
	commit := func(b *testing.B, st *pgstore.Store, ds ...store.DeadLetter) {
		uow, err := st.Begin(context.Background())
		if err != nil {
			b.Fatal(err)
		}
		if err := uow.Commit(context.Background(), &store.Changes{DeadLetters: ds}); err != nil {
			b.Fatal(err)
		}
	}
	seed := func(b *testing.B, st *pgstore.Store) {
		ds := make([]store.DeadLetter, 1000)
		for i := range ds {
			ds[i] = letter(i)
		}
		commit(b, st, ds...)
	}
	b.Run("record", func(b *testing.B) {
		st := openStore(b, pgstore.Config{})
		b.ResetTimer()
		for i := range b.N {
			commit(b, st, letter(i))
		}
	})
	b.Run("record-again", func(b *testing.B) {
		st := openStore(b, pgstore.Config{})
		seed(b, st)
		b.ResetTimer()
		for i := range b.N {
			commit(b, st, letter(i%1000))
		}
	})
	b.Run("replay", func(b *testing.B) {
		st := openStore(b, pgstore.Config{})
		seed(b, st)
		ctx := context.Background()
		b.ResetTimer()
		for i := range b.N {
			id := "dl-" + strconv.Itoa(i%1000)
			if err := st.BeginReplay(ctx, id, at); err != nil {
				b.Fatal(err)
			}
			if err := st.SettleReplays(ctx, &store.SettleReplaysParams{IDs: []string{id}, Outcome: store.ReplaySucceeded, At: at}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

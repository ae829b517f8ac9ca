package pgstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// BenchmarkRetryState measures what retry state adds to one
// failure-retry cycle: "commit" is the commit that applies a message (an
// inbox record, as every applied message writes); "failure-retry" is the
// same commit preceded by the failure's RecordRetry and clearing the
// retry in it, as the engine does for a message that failed once. The
// difference of the two is the bookkeeping's cost per cycle; a message
// applied at its first delivery pays only "commit".
func BenchmarkRetryState(b *testing.B) {
	for _, failed := range []bool{false, true} {
		name := map[bool]string{false: "commit", true: "failure-retry"}[failed]
		b.Run(name, func(b *testing.B) {
			st := openStore(b, pgstore.Config{})
			ctx := context.Background()
			at := time.Now().UTC()
			b.ResetTimer()
			for i := range b.N {
				id := "m-" + strconv.Itoa(i)
				c := &store.Changes{Inbox: []store.InboxEntry{{InboxKey: store.InboxKey{SagaType: "order", Key: "k" + strconv.Itoa(i%1000), MessageID: id}, ProcessedAt: at}}}
				if failed {
					r := store.Retry{ID: id, SagaType: "order", Key: "k", MessageID: id, MessageType: "orders.Paid", Attempts: 1,
						Error: "charge card: connection refused", FirstFailedAt: at, LastFailedAt: at, NextAttemptAt: at.Add(time.Second)}
					if err := st.RecordRetry(ctx, &r); err != nil {
						b.Fatal(err)
					}
					c.ClearRetries = []string{id}
				}
				uow, err := st.Begin(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := uow.Commit(ctx, c); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

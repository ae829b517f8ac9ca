package pgstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// BenchmarkRetryState measures what retry state adds to the commit that
// applies a message (an inbox record, as every applied message writes):
//
//   - "commit": that commit alone, as for a message applied at its first
//     delivery;
//   - "commit+retry": the same commit recording one retry too
//     (Changes.RecordRetries), as the engine records a failed message's
//     retry (on the store's own queue the failed unit of work commits
//     anyway, to return the message);
//   - "failure-retry": the retry upserted by RecordRetry in a transaction
//     of its own, then the commit clearing it (Changes.ClearRetries), as
//     the engine did before the retry joined the commit.
//
// The difference with "commit" is the bookkeeping's cost per failed
// delivery.
func BenchmarkRetryState(b *testing.B) {
	for _, name := range []string{"commit", "commit+retry", "failure-retry"} {
		b.Run(name, func(b *testing.B) {
			st := openStore(b, pgstore.Config{})
			ctx := context.Background()
			at := time.Now().UTC()
			b.ResetTimer()
			for i := range b.N {
				id := "m-" + strconv.Itoa(i)
				c := &store.Changes{Inbox: []store.InboxEntry{{InboxKey: store.InboxKey{SagaType: "order", Key: "k" + strconv.Itoa(i%1000), MessageID: id}, ProcessedAt: at}}}
				r := store.Retry{ID: "r-" + id, SagaType: "order", Key: "k", MessageID: "r-" + id, MessageType: "orders.Paid", Attempts: 1,
					Error: "charge card: connection refused", FirstFailedAt: at, LastFailedAt: at, NextAttemptAt: at.Add(time.Second)}
				switch name {
				case "commit+retry":
					c.RecordRetries = []store.Retry{r}
				case "failure-retry":
					if err := st.RecordRetry(ctx, &r); err != nil {
						b.Fatal(err)
					}
					c.ClearRetries = []string{r.ID}
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

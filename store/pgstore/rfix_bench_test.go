package pgstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/pgstore"
)

// BenchmarkRetryInCommit measures a retry recorded in a commit
// (Changes.RecordRetries), as the engine now records a failed message's
// retry: "commit" is a commit of one inbox record; "commit+retry" the same
// commit recording one retry too (on the store's own queue the failed
// unit of work commits anyway, to return the message). Compare with
// BenchmarkRetryState's failure-retry, where the retry was a statement in
// a transaction of its own.
func BenchmarkRetryInCommit(b *testing.B) {
	for _, record := range []bool{false, true} {
		name := map[bool]string{false: "commit", true: "commit+retry"}[record]
		b.Run(name, func(b *testing.B) {
			st := openStore(b, pgstore.Config{})
			ctx := context.Background()
			at := time.Now().UTC()
			b.ResetTimer()
			for i := range b.N {
				id := "m-" + strconv.Itoa(i)
				c := &store.Changes{Inbox: []store.InboxEntry{{InboxKey: store.InboxKey{SagaType: "order", Key: "k" + strconv.Itoa(i%1000), MessageID: id}, ProcessedAt: at}}}
				if record {
					c.RecordRetries = []store.Retry{{ID: "r-" + id, SagaType: "order", Key: "k", MessageID: "r-" + id, MessageType: "orders.Paid", Attempts: 1,
						Error: "charge card: connection refused", FirstFailedAt: at, LastFailedAt: at, NextAttemptAt: at.Add(time.Second)}}
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

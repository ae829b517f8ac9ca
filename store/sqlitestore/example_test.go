package sqlitestore_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/sqlitestore"
	"github.com/idemhq/idem/transport"
)

// Open creates (or opens) the database file and migrates its schema. The
// store keeps saga state and is also a durable queue, so an engine takes it
// as both store and transport: idem.NewEngine(st, st, nil).
func ExampleOpen() {
	dir, err := os.MkdirTemp("", "idem-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()

	st, err := sqlitestore.Open(ctx, filepath.Join(dir, "idem.db"), &sqlitestore.Config{Lease: 30 * time.Second})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()

	// A unit of work: insert a saga instance and record the message that
	// created it, in one durable commit.
	now := time.Now().UTC()
	uow, err := st.Begin(ctx)
	if err != nil {
		log.Fatal(err)
	}
	err = uow.Commit(ctx, &store.Changes{
		Inserts: []*store.Instance{{SagaType: "order", Key: "o-1", State: "Placed", Data: []byte(`{"total":12}`), Version: 1, CreatedAt: now, UpdatedAt: now}},
		Inbox:   []store.InboxEntry{{InboxKey: store.InboxKey{SagaType: "order", Key: "o-1", MessageID: "m-1"}, ProcessedAt: now}},
	})
	if err != nil {
		log.Fatal(err)
	}

	// The queue: publish, receive with a lease, acknowledge.
	if err := st.Publish(ctx, []transport.Envelope{{ID: "m-2", Type: "orders.Ship", Body: []byte(`{"order":"o-1"}`)}}); err != nil {
		log.Fatal(err)
	}
	ds, err := st.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("received", ds[0].Envelope.ID, "attempt", ds[0].Attempt)
	if err := st.Ack(ctx, ds); err != nil {
		log.Fatal(err)
	}

	uow, _ = st.Begin(ctx)
	defer uow.Rollback(ctx)
	res, err := uow.Load(ctx, &store.LoadParams{
		Keys:  []store.Key{{SagaType: "order", Key: "o-1"}},
		Inbox: []store.InboxKey{{SagaType: "order", Key: "o-1", MessageID: "m-1"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	in := res.Instances[store.Key{SagaType: "order", Key: "o-1"}]
	fmt.Println(in.SagaType, in.Key, in.State, "version", in.Version, "data", string(in.Data))
	fmt.Println("m-1 seen:", res.Seen[store.InboxKey{SagaType: "order", Key: "o-1", MessageID: "m-1"}])
	// Output:
	// received m-2 attempt 1
	// order o-1 Placed version 1 data {"total":12}
	// m-1 seen: true
}

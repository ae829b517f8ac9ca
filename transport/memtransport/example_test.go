package memtransport_test

import (
	"context"
	"fmt"
	"log"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/memtransport"
)

// A transport that delivers every message twice, as a broker may: the engine
// must apply it once.
func Example() {
	ctx := context.Background()
	tr := memtransport.New(&memtransport.Config{Duplicate: 1})
	defer tr.Close()

	err := tr.Publish(ctx, []transport.Envelope{
		{ID: "order-1", Type: "OrderPlaced", CorrelationID: "customer-7", Body: []byte(`{"total":42}`)},
	})
	if err != nil {
		log.Fatal(err)
	}

	ds, err := tr.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	for _, d := range ds {
		fmt.Printf("%s attempt %d: %s\n", d.Envelope.ID, d.Attempt, d.Envelope.Body)
	}
	if err := tr.Ack(ctx, ds); err != nil {
		log.Fatal(err)
	}

	s := tr.Stats()
	fmt.Printf("published %d, duplicates injected %d, delivered %d, pending %d\n",
		s.Published, s.DuplicatesInjected, s.Delivered, tr.Unsettled())
	// Output:
	// order-1 attempt 1: {"total":42}
	// order-1 attempt 1: {"total":42}
	// published 1, duplicates injected 1, delivered 2, pending 0
}

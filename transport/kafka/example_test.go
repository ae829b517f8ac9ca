package kafka_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/idemhq/idem/transport"
	"github.com/idemhq/idem/transport/kafka"
)

// Open a transport on a Kafka cluster (here franz-go's in-process kfake,
// standing in for one), publish an envelope and receive it.
func ExampleOpen() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		log.Fatal(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tr, err := kafka.Open(ctx, "kafka://"+cluster.ListenAddrs()[0], &kafka.Config{Topic: "orders", Partitions: 4})
	if err != nil {
		log.Fatal(err)
	}
	defer tr.Close()

	err = tr.Publish(ctx, []transport.Envelope{{ID: "m1", Type: "OrderPlaced", CorrelationID: "order-42", SentAt: time.Now(), Body: []byte(`{"total":3}`)}})
	if err != nil {
		log.Fatal(err)
	}
	ds, err := tr.Receive(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(ds[0].Envelope.ID, ds[0].Envelope.Type, ds[0].Attempt)
	if err := tr.Ack(ctx, ds); err != nil {
		log.Fatal(err)
	}
	// Output: m1 OrderPlaced 1
}

package rabbitmq_test

import (
	"context"
	"log"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport/rabbitmq"
)

// An engine with its state in PostgreSQL and its messages in RabbitMQ: the
// inbox makes redeliveries harmless and the outbox relay re-sends what a
// crash left unsent. (No output: it needs both servers.)
func Example() {
	ctx := context.Background()
	st, err := pgstore.Open(ctx, "postgres://idem@127.0.0.1:5432/idem", &pgstore.Config{Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	tr, err := rabbitmq.Open(ctx, "amqp://idem:secret@127.0.0.1:5672/idem", &rabbitmq.Config{
		Namespace:  "orders",
		Partitions: 16,              // the same on every replica
		Prefetch:   128,             // about twice the engine's batch
		Lease:      2 * time.Minute, // below the broker's consumer_timeout
	})
	if err != nil {
		log.Fatal(err) // says what to change: URL, credentials, permissions, queues
	}
	defer tr.Close()
	e, err := idem.NewEngine(st, tr, &idem.Config{BatchSize: 64})
	if err != nil {
		log.Fatal(err)
	}
	// Register sagas and handlers, then e.Start(ctx) … e.Stop(ctx).
	_ = e
}

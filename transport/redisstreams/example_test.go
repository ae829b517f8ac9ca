package redisstreams_test

import (
	"context"
	"log"
	"time"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/store/pgstore"
	"github.com/idemhq/idem/transport/redisstreams"
)

// An engine with its state in PostgreSQL and its messages in Redis
// Streams: the inbox makes redeliveries harmless and the outbox relay
// re-sends what a crash left unsent. The server must run with appendonly
// yes and appendfsync always. (No output: it needs both servers.)
func Example() {
	ctx := context.Background()
	st, err := pgstore.Open(ctx, "postgres://idem@127.0.0.1:5432/idem", &pgstore.Config{Migrate: true})
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	tr, err := redisstreams.Open(ctx, "redis://idem:secret@127.0.0.1:6379/0", &redisstreams.Config{
		Namespace:  "orders",
		Partitions: 16,              // the same on every replica; a multiple of Consumers
		Lease:      2 * time.Minute, // longer than a batch takes
	})
	if err != nil {
		log.Fatal(err) // says what to change: URL, password, appendfsync, eviction
	}
	defer tr.Close()
	e, err := idem.NewEngine(st, tr, &idem.Config{BatchSize: 64, Consumers: 4})
	if err != nil {
		log.Fatal(err)
	}
	// Register sagas and handlers, then e.Start(ctx) … e.Stop(ctx).
	_ = e
}

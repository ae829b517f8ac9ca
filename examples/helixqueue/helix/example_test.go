package helix_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/idemhq/idem/examples/helixqueue/helix"
)

// A GPU worker process: the store and Redis as the command line's --store
// and --redis give them, the batch saga with a two-minute lease, and a
// worker that runs batches until ctx ends. (No output: it needs Redis.)
func ExampleWorker() {
	ctx := context.Background()
	app, err := helix.Open(ctx, helix.Options{
		Store:   "/var/lib/helixqueue/helix.db", // or postgres://…
		Redis:   "redis://127.0.0.1:6379/0",
		Machine: helix.MachineConfig{Lease: 2 * time.Minute},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer app.Close()
	if err := app.Engine.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer app.Engine.Stop(ctx) //nolint:errcheck // example
	w := &helix.Worker{ID: "gpu-7", App: app, Metrics: helix.NewMetrics(app),
		Work: func(ctx context.Context, sample string, attempt int) (string, error) {
			return fmt.Sprintf("reads of %s", sample), nil // the GPU's work
		}}
	_ = w.Run(ctx)
}

// The canonical sample ID: the NFD twin of an ID is the same batch.
func ExampleCanonicalID() {
	k, err := helix.CanonicalID("Sa\u0308mple-1") // "a" + combining diaeresis
	fmt.Printf("%+q %v\n", k, err)
	// Output: "S\u00e4mple-1" <nil>
}

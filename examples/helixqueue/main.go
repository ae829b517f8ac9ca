// Command helixqueue is HelixQueue rebuilt on Idem: it assigns sequencing
// batches to GPU workers with Redis Streams as the transport and SQLite or
// PostgreSQL as the store. "helixqueue submit" submits batches, "helixqueue
// worker" runs a GPU worker, "helixqueue audit" prints the audit trail and
// "helixqueue run-demo" shows twins, duplicates and a killed worker. See
// README.md and package helix.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemhq/idem/examples/helixqueue/helix"
	"github.com/idemhq/idem/transport/redisstreams"
)

func main() {
	// go-redis's own lines (a failed dial during an outage) become slog
	// records like the engine's, instead of unstructured stderr lines.
	redisstreams.LogTo(slog.Default())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := helix.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

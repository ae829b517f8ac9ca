// Command helixqueue is HelixQueue rebuilt on Idem: it assigns sequencing
// batches to GPU workers with Redis Streams as the transport and SQLite or
// PostgreSQL as the store. "helixqueue submit" submits batches, "helixqueue
// worker" runs a GPU worker, "helixqueue audit" prints the audit trail and
// "helixqueue run-demo" shows twins, duplicates and a killed worker. See
// README.md and package helix.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemhq/idem/examples/helixqueue/helix"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := helix.Main(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// Command dispatch is the dispatch ledger of medical drone missions, built on
// Idem: "dispatch write" pseudonymises events and writes them through a
// per-patient saga to an append-only ledger, "dispatch validate" checks the
// ledger's replay safety, "dispatch serve" runs a writer with an HTTP intake.
// See README.md and package ledger.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemhq/idem/examples/dispatch/ledger"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := ledger.Main(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

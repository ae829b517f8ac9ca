// Command idem is Idem's command line: the demo, machine graphs and
// operations tools. Run `idem --help`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/idemhq/idem/cmd/idem/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

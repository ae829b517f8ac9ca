package torture_test

import (
	"context"
	"os"
	"os/exec"
	"time"

	"github.com/idemhq/idem/cmd/idem/internal/torture"
)

// A run on SQLite with the idem binary's hidden worker subcommand; it
// exits non-zero when an invariant fails. (Not run: it needs the binary.)
func ExampleRun() {
	r, err := torture.Run(context.Background(), torture.Options{
		Store:    "sqlite",
		Duration: 60 * time.Second,
		Seed:     1,
		MinKills: 10,
		Command:  func() *exec.Cmd { return exec.Command("idem", "torture-worker") },
		Log:      os.Stderr,
	})
	if err != nil {
		panic(err)
	}
	r.Print(os.Stdout)
	if !r.Pass() {
		os.Exit(1)
	}
}

// Package cli implements the idem command line. Run is the whole program,
// so the CLI is tested in-process, exit codes included.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/examples/orders"
	"github.com/idemhq/idem/examples/searchimport"
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// Run executes the command line args and returns the process exit code:
// 0 on success, 1 when the command ran and found a failure (an invariant
// broken, say), 2 for usage errors, 3 when idem deploy check found a
// hazard.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "idem:", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 2
}

func newRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "idem",
		Short: "Idem runs message-driven sagas with exactly-once effects on at-least-once delivery",
		Long: `Idem runs message-driven sagas (process managers) with exactly-once effects on
top of at-least-once delivery: duplicates are skipped by an inbox, state,
emitted messages and timers commit in one transaction, and emitted messages
carry deterministic IDs.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version(),
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return checkAmbiguousType(cmd)
		},
	}
	root.SetVersionTemplate("idem {{.Version}}\n")
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newDemo(), newDemoWorker(), newGraph(), newVersion(), newMigrate(), newDLQ(), newSagas(), newTimers(), newSchedules(), newBench(), newBenchReplica())
	root.AddCommand(newReplicas(), newRetries(), newLimits(), newDeploy())
	root.AddCommand(newServe(), newTorture(), newTortureWorker())
	return root
}

// exampleMachines are the sagas this binary knows, the example
// applications: idem serve registers them and idem graph draws them.
func exampleMachines() []idem.Machine {
	return []idem.Machine{searchimport.New(searchimport.Config{}).Machine, orders.OrderMachine()}
}

// machines are exampleMachines by saga type.
func machines() map[string]idem.Machine {
	ms := map[string]idem.Machine{}
	for _, m := range exampleMachines() {
		ms[m.Name()] = m
	}
	return ms
}

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of idem and of Go it was built with (also idem --version)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			fmt.Fprintf(cmd.OutOrStdout(), "idem %s\n", version())
			return nil
		},
	}
}

// version is the module version and VCS revision idem was built from, and
// the Go version, from runtime/debug.ReadBuildInfo.
func version() string {
	v, goV := "(devel)", "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		goV = bi.GoVersion
		if bi.Main.Version != "" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				v += " " + s.Value
			}
		}
	}
	return v + " (" + goV + ")"
}

package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/saga"
)

func newGraph() *cobra.Command {
	var format string
	cmd := &cobra.Command{
		Use:   "graph [saga-type]",
		Short: "Print a saga machine as a Mermaid or DOT diagram, or its description as JSON, and its validation problems",
		Long: `Print a registered saga machine as a diagram. Without an argument, lists the
saga types this binary knows. --format json prints the machine's complete
description with its definition fingerprint (docs/deploys.md); without an
argument it prints every machine's, as a JSON array. Validation problems
(unhandled events, unreachable states, events that can never be consumed)
are printed to stderr, and make the command exit 1.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !slices.Contains([]string{"mermaid", "dot", "json"}, format) {
				return fmt.Errorf("unknown --format %q: use mermaid, dot or json", format)
			}
			ms, err := graphMachines(args)
			if err != nil {
				return err
			}
			switch {
			case format == "json":
				err = printDescriptions(cmd.OutOrStdout(), ms, len(args) == 0)
			case len(args) == 0:
				for _, m := range ms {
					fmt.Fprintln(cmd.OutOrStdout(), m.Name())
				}
				return nil
			case format == "mermaid":
				fmt.Fprint(cmd.OutOrStdout(), ms[0].Mermaid())
			default:
				fmt.Fprint(cmd.OutOrStdout(), ms[0].DOT())
			}
			if err != nil {
				return err
			}
			return validateMachines(cmd.ErrOrStderr(), ms)
		},
	}
	cmd.Flags().StringVar(&format, "format", "mermaid", "output format: mermaid, dot or json (the description and its fingerprint)")
	return cmd
}

// graphMachines returns the machine args names, or every machine by name
// when args is empty.
func graphMachines(args []string) ([]idem.Machine, error) {
	ms := machines()
	names := make([]string, 0, len(ms))
	for n := range ms {
		names = append(names, n)
	}
	slices.Sort(names)
	if len(args) == 0 {
		out := make([]idem.Machine, 0, len(names))
		for _, n := range names {
			out = append(out, ms[n])
		}
		return out, nil
	}
	m, ok := ms[args[0]]
	if !ok {
		return nil, fmt.Errorf("unknown saga type %q: known types are %s", args[0], strings.Join(names, ", "))
	}
	return []idem.Machine{m}, nil
}

// describedMachine is what idem graph --format json prints for a machine:
// its description with the description's fingerprint beside its fields.
type describedMachine struct {
	Fingerprint string `json:"fingerprint"`
	saga.Description
}

// printDescriptions writes the machines' descriptions as indented JSON:
// an array when all is set, one object otherwise.
func printDescriptions(w io.Writer, ms []idem.Machine, all bool) error {
	out := make([]describedMachine, 0, len(ms))
	for _, m := range ms {
		d := m.Describe()
		out = append(out, describedMachine{Fingerprint: d.Fingerprint(), Description: d})
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	var v any = out
	if !all {
		v = out[0]
	}
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write descriptions: %w", err)
	}
	return nil
}

// validateMachines writes each machine's validation problems to w, and
// returns an exit error when any has some.
func validateMachines(w io.Writer, ms []idem.Machine) error {
	bad := false
	for _, m := range ms {
		if err := m.Validate(); err != nil {
			fmt.Fprintf(w, "validation problems in %s:\n%s\n", m.Name(), err)
			bad = true
		}
	}
	if bad {
		return &exitError{code: 1, err: errors.New("machine has validation problems")}
	}
	return nil
}

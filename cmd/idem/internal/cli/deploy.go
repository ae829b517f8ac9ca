package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/deploycheck"
	"github.com/idemhq/idem/saga"
)

// exitHazard is the exit code of `idem deploy check` when the report has
// a hazard: distinct from 1 (the check could not run) and 2 (usage), so
// that CI or a rollout can tell "unsafe" from "broken".
const exitHazard = 3

// maxDefinitionsBytes bounds the --definitions input.
const maxDefinitionsBytes = 64 << 20

// newDeploy is `idem deploy` and its subcommands check and migrate.
func newDeploy() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "deploy",
		Short: "Check before a rollout whether a new build's saga machines can serve what the store holds, and migrate what they declare",
		Long: `Compare a new build's saga machines with the live sagas, pending timers,
queued and outbox messages, attributes and running replicas a store holds,
before the build is rolled out, and apply the state migrations the build
declares to every stored saga at once (docs/deploys.md).`,
	}
	cmd.AddCommand(newDeployCheck(), newDeployMigrate())
	return cmd
}

// deployCheckFlags are the flags of idem deploy check.
type deployCheckFlags struct {
	sf          storeFlags
	asJSON      bool
	definitions string
	handled     []string
	sample      int
}

func newDeployCheck() *cobra.Command {
	var f deployCheckFlags
	cmd := &cobra.Command{
		Use:   "check [--definitions FILE|-] [--handled TYPE]... [--sample N] [--json]",
		Short: "List each hazard of deploying a new build, with the live count behind it; exit 3 on a hazard",
		Long: `Compare a new build's saga machines with what the store holds and list each
hazard with the count behind it and what to change: live sagas in a state
or of a type the build no longer has, states that no longer accept an event
a pending timer or a queued message will deliver, timers whose event is
gone, schema versions the build cannot upgrade from (or newer than it
knows: a rollback), attributes removed, queued messages nothing consumes,
and replicas of another definition still running. It only reads the store.

The new build's machines are, by default, the ones this binary registers
(those idem graph lists, with the message types idem serve handles).
--definitions FILE (or - for stdin) reads them instead from the JSON that
idem graph --format json prints: one description or an array of them. Your
own program prints the same JSON for its machines with
json.Marshal(m.Describe()) (one machine; an array of several); a
"fingerprint" field, if present, must match its description. --handled
TYPE names a message type the build's plain handlers (Engine.Handle)
consume (repeatable).

--sample N also decodes up to N live state documents per saga type, the
least recently updated first, with the build's upgrade functions, and
reports each that fails with its key (state-undecodable). It runs the
machines' code, so it needs the machines in this process: it cannot be
combined with --definitions (in your own program, call deploycheck.Check
with Options.Sample).

Exit status: 0 safe to deploy (notices do not count), 3 at least one
hazard, 1 the check could not read the store, 2 a usage error (bad flags,
bad --definitions input, no or unmigrated store).
` + storeHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runDeployCheck(cmd, &f) },
	}
	f.sf.registerReadOnly(cmd)
	cmd.Flags().BoolVar(&f.asJSON, "json", false, "print the report as JSON (deploycheck.Report)")
	cmd.Flags().StringVar(&f.definitions, "definitions", "", "read the new build's machines from this file (- for stdin): the JSON of idem graph --format json, or json.Marshal(m.Describe())")
	cmd.Flags().StringArrayVar(&f.handled, "handled", nil, "a message type the new build's plain handlers consume (repeatable)")
	cmd.Flags().IntVar(&f.sample, "sample", 0, "also decode up to N live state documents per saga type with the build's upgrade functions (not with --definitions)")
	return cmd
}

func runDeployCheck(cmd *cobra.Command, f *deployCheckFlags) error {
	o, err := f.options(cmd)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	st, _, err := f.sf.open(ctx, false)
	if err != nil {
		return err
	}
	defer st.Close()
	r, err := deploycheck.Check(ctx, st, o)
	if err != nil {
		return failed(fmt.Errorf("deploy check: %w", err))
	}
	if f.asJSON {
		err = writeJSON(cmd.OutOrStdout(), r)
	} else {
		err = r.WriteText(cmd.OutOrStdout())
	}
	if err != nil {
		return failed(fmt.Errorf("write the report: %w", err))
	}
	if !r.OK() {
		return &exitError{code: exitHazard, err: fmt.Errorf("not safe to deploy: %d hazard(s)", len(r.Hazards))}
	}
	return nil
}

// options are the deploycheck.Options the flags ask for.
func (f *deployCheckFlags) options(cmd *cobra.Command) (deploycheck.Options, error) {
	o := deploycheck.Options{Sample: f.sample, Handled: slices.Clone(f.handled)}
	switch {
	case f.sample < 0:
		return o, usageErrorf("--sample is %d: give how many live state documents to decode per saga type, or 0 for none", f.sample)
	case f.definitions != "" && f.sample > 0:
		return o, usageErrorf("--sample runs the new build's upgrade functions, and a --definitions file holds descriptions, not code: drop --sample, or run the check in the new build's own program (deploycheck.Check with Options.Sample)")
	case f.definitions != "":
		ds, err := readDefinitions(cmd.InOrStdin(), f.definitions)
		if err != nil {
			return o, err
		}
		o.Machines = ds
		return o, nil
	}
	o.Handled = append(o.Handled, serveHandled()...)
	o.Decoders = map[string]func([]byte, int) error{}
	for _, m := range exampleMachines() {
		o.Machines = append(o.Machines, m.Describe())
		if dc, ok := m.(deploycheck.DataChecker); ok {
			o.Decoders[m.Name()] = dc.CheckData
		}
	}
	return o, nil
}

// describedInput is one machine of a --definitions file: its description
// and, when idem graph printed it, its fingerprint.
type describedInput struct {
	Fingerprint *string `json:"fingerprint"`
	saga.Description
}

// readDefinitions reads the descriptions of --definitions name (- for
// stdin): one JSON object or an array of them, each a saga.Description
// with an optional fingerprint that must match it.
func readDefinitions(stdin io.Reader, name string) ([]saga.Description, error) {
	data, err := readDefinitionsFile(stdin, name)
	if err != nil {
		return nil, err
	}
	what := fmt.Sprintf("--definitions %q", name)
	if name == "-" {
		what = "--definitions - (stdin)"
	}
	trimmed := bytes.TrimSpace(data)
	var in []describedInput
	switch {
	case len(trimmed) == 0:
		return nil, usageErrorf("%s is empty: give the JSON that idem graph --format json prints", what)
	case trimmed[0] == '[':
		err = decodeStrict(trimmed, &in)
	case trimmed[0] == '{':
		in = make([]describedInput, 1)
		err = decodeStrict(trimmed, &in[0])
	default:
		return nil, usageErrorf("%s is not a JSON object or array: give the JSON that idem graph --format json prints", what)
	}
	if err != nil {
		return nil, usageErrorf("%s is not the JSON that idem graph --format json prints: %v", what, err)
	}
	return checkDescriptions(what, in)
}

// readDefinitionsFile reads name, or stdin for "-", up to
// maxDefinitionsBytes.
func readDefinitionsFile(stdin io.Reader, name string) ([]byte, error) {
	r := stdin
	if name != "-" {
		fh, err := os.Open(name)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // its path is name, printed quoted
			}
			return nil, usageErrorf("--definitions %q: %v", name, err)
		}
		defer fh.Close()
		r = fh
	}
	data, err := io.ReadAll(io.LimitReader(r, maxDefinitionsBytes+1))
	switch {
	case err != nil:
		return nil, usageErrorf("--definitions: read %q: %v", name, err)
	case len(data) > maxDefinitionsBytes:
		return nil, usageErrorf("--definitions %q is larger than %d MiB: is it the JSON of idem graph --format json?", name, maxDefinitionsBytes>>20)
	}
	return data, nil
}

// decodeStrict decodes one JSON value from data into v, refusing
// anything after it.
func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("%w (at byte %d)", err, se.Offset)
		}
		return err
	}
	if dec.More() {
		return fmt.Errorf("more than one JSON value: put several descriptions in one array")
	}
	return nil
}

// checkDescriptions refuses an empty list, a description without a name,
// a saga type given twice, and a fingerprint that is not its
// description's.
func checkDescriptions(what string, in []describedInput) ([]saga.Description, error) {
	if len(in) == 0 {
		return nil, usageErrorf("%s holds an empty array: give at least one machine's description", what)
	}
	out := make([]saga.Description, 0, len(in))
	seen := map[string]bool{}
	for i, d := range in {
		switch {
		case d.Name == "":
			return nil, usageErrorf("%s: description %d has no \"name\": is it the JSON of idem graph --format json?", what, i+1)
		case seen[d.Name]:
			return nil, usageErrorf("%s describes saga type %q twice: keep one description per saga type", what, d.Name)
		case d.Fingerprint != nil && *d.Fingerprint != d.Description.Fingerprint():
			return nil, usageErrorf("%s: the fingerprint of saga type %q is %q, but its description fingerprints as %q: the description was edited, or printed by another version of idem; print it again, or remove the \"fingerprint\" field to check the description as it is",
				what, d.Name, *d.Fingerprint, d.Description.Fingerprint())
		}
		seen[d.Name] = true
		out = append(out, d.Description)
	}
	return out, nil
}

package cli

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// maxLimit is the largest --limit of any command: the largest page a
// store answers in one query (store.MaxRetryPage), so that a page is never
// silently cut shorter than asked.
const maxLimit = 1000

// limitValue is --limit, checked the same way on every command when the
// flags are parsed: a whole number from 1 to maxLimit.
type limitValue struct{ n *int }

func (v limitValue) String() string { return strconv.Itoa(*v.n) }
func (v limitValue) Type() string   { return "int" }

// Set refuses 0, negative numbers and more than maxLimit: a page of none
// or of "everything" is never what a list command means.
func (v limitValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > maxLimit {
		return fmt.Errorf("--limit takes a whole number from 1 to %d", maxLimit)
	}
	*v.n = n
	return nil
}

// limitFlag registers --limit on cmd into n, def by default; what says
// what it bounds ("page size", "at most this many groups").
func limitFlag(cmd *cobra.Command, n *int, def int, what string) {
	*n = def
	cmd.Flags().Var(limitValue{n}, "limit", fmt.Sprintf("%s, from 1 to %d", what, maxLimit))
}

// typeFlags registers the type filters of a command, one name for each
// meaning across every command: --saga-type for the saga type (into
// sagaType, when not nil) and --message-type for the envelope's type (into
// messageType, when not nil). --type, which once meant either, is refused
// by checkAmbiguousType.
func typeFlags(cmd *cobra.Command, sagaType, messageType *string, sagaUsage, messageUsage string) {
	if sagaType != nil {
		cmd.Flags().StringVar(sagaType, "saga-type", "", sagaUsage)
	}
	if messageType != nil {
		cmd.Flags().StringVar(messageType, "message-type", "", messageUsage)
	}
	cmd.Flags().String("type", "", "ambiguous: use --saga-type or --message-type")
	_ = cmd.Flags().MarkHidden("type")
}

// checkAmbiguousType refuses --type with a message naming the two flags
// that replace it, and what each selects on this command.
func checkAmbiguousType(cmd *cobra.Command) error {
	f := cmd.Flags().Lookup("type")
	if f == nil || !f.Changed {
		return nil
	}
	var say []string
	if cmd.Flags().Lookup("saga-type") != nil {
		say = append(say, "--saga-type "+shellWord(f.Value.String())+" for the saga type")
	}
	if cmd.Flags().Lookup("message-type") != nil {
		say = append(say, "--message-type "+shellWord(f.Value.String())+" for the message type")
	}
	return usageErrorf("--type is ambiguous (a saga type or a message type?): say %s", strings.Join(say, ", or "))
}

// rerun is a command line that repeats cmd as the user gave it, for a hint
// such as the next page's: the command path, every flag the user set
// (store, schema, filters, limit, ...) but those in drop, then extra.
// Values are quoted for a POSIX shell. A --store or --transport URL that
// holds a password is never printed: the line reads it from IDEM_STORE or
// IDEM_TRANSPORT, and a second line says to set that variable.
func rerun(cmd *cobra.Command, drop []string, extra ...string) string {
	return commandLine(cmd.CommandPath(), cmd, func(name string) bool { return !slices.Contains(drop, name) }, extra...)
}

// storeFlagNames are the flags that say which store a command opens.
var storeFlagNames = []string{"store", "schema", "allow-unsafe-commit"}

// onStore is the command line of another command (path, "idem sagas ls"
// say) on the store cmd was given: cmd's store flags, then extra, for a
// hint such as "list them with ...".
func onStore(cmd *cobra.Command, path string, extra ...string) string {
	return commandLine(path, cmd, func(name string) bool { return slices.Contains(storeFlagNames, name) }, extra...)
}

// commandLine is path, then the flags of cmd the user set that keep
// selects, then extra (see rerun).
func commandLine(path string, cmd *cobra.Command, keep func(name string) bool, extra ...string) string {
	var b strings.Builder
	var notes []string
	b.WriteString(path)
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if !keep(f.Name) || f.Hidden {
			return
		}
		if env := secretEnv[f.Name]; env != "" && holdsSecret(f.Value.String()) {
			fmt.Fprintf(&b, " --%s \"$%s\"", f.Name, env)
			notes = append(notes, fmt.Sprintf("set %s to your --%s URL first: it holds a password, which idem never prints", env, f.Name))
			return
		}
		if f.Value.Type() == "bool" {
			fmt.Fprintf(&b, " --%s", f.Name)
			if f.Value.String() != "true" {
				b.WriteString("=false")
			}
			return
		}
		for _, v := range flagValues(f) {
			fmt.Fprintf(&b, " --%s %s", f.Name, hintWord(v))
		}
	})
	for _, w := range extra {
		b.WriteString(" " + w)
	}
	for _, n := range notes {
		b.WriteString("\n  (" + n + ")")
	}
	return b.String()
}

// hintWord is s as one word of a command line printed for the user to
// run: quoted for a POSIX shell when it needs it, and in bash's $'...'
// form, with escapes, when it holds characters that must not reach a
// terminal raw (see clean).
func hintWord(s string) string {
	if clean(s) == s {
		return shellWord(s)
	}
	q := strconv.Quote(s)
	return "$'" + strings.ReplaceAll(q[1:len(q)-1], "'", `\'`) + "'"
}

// moreHint is the line a full page ends with, on stderr: the command that
// lists the next page, after the cursor next.
func moreHint(cmd *cobra.Command, next string) string {
	return "more may follow: " + rerun(cmd, []string{"after"}, "--after", hintWord(next)) + "\n"
}

// secretEnv names, for each flag that takes a URL which may hold a
// password, the variable a hint reads it from instead.
var secretEnv = map[string]string{"store": "IDEM_STORE", "transport": "IDEM_TRANSPORT"}

// flagValues is what the user gave f: each value of a repeatable flag.
func flagValues(f *pflag.Flag) []string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		return sv.GetSlice()
	}
	return []string{f.Value.String()}
}

// holdsSecret reports whether a store or transport URL holds a secret: a
// password in its user information, a password parameter (PostgreSQL's
// ?password= or a key=value DSN), or, on a URL that is not PostgreSQL's,
// any user information (NATS takes a token as nats://TOKEN@host).
func holdsSecret(raw string) bool {
	if strings.Contains(strings.ToLower(raw), "password") {
		return true
	}
	u, err := url.Parse(raw)
	if err != nil {
		return strings.Contains(raw, "@") // unparsable: say nothing of it
	}
	if _, has := u.User.Password(); has {
		return true
	}
	for k := range u.Query() { // decoded: pgx reads ?pass%77ord= as password
		if strings.Contains(strings.ToLower(k), "password") {
			return true
		}
	}
	return u.User != nil && u.Scheme != "postgres" && u.Scheme != "postgresql"
}

package cli

import (
	"context"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/store"
)

// newLimits is `idem limits` and its subcommands ls, set and reset.
func newLimits() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "limits",
		Short: "List flow-control limits with their use, and override them at runtime",
		Long: `Flow-control limits (concurrency caps and rate limits) are declared in code
(idem.Config.Limits); each engine records its declarations in the store at
start and again while it runs, and the engines' sweeper deletes those no
running engine declares any more. An override kept in the store replaces a limit's declared values on
every replica within its Config.LimitsInterval (1s by default), with
nothing drained first. These commands work on the store directly. See
docs/operations.md, "Flow control".`,
	}
	cmd.AddCommand(newLimitsLs(), newLimitsSet(), newLimitsReset())
	return cmd
}

// limitValues are a limit's values as idem limits shows them.
type limitValues struct {
	Concurrency int       `json:"concurrency"`
	Rate        float64   `json:"rate"`
	Burst       int       `json:"burst"`
	UpdatedAt   time.Time `json:"updated_at,omitzero"`
}

// limitCounter is one counter of a limit in use.
type limitCounter struct {
	Key      string  `json:"key"`
	InFlight int     `json:"in_flight"`
	Tokens   float64 `json:"tokens"`
	Waiting  int     `json:"waiting"`
}

// limitView is one limit as idem limits ls shows it: what the code
// declares, the override, what is in force, and its counters in use.
type limitView struct {
	Name     string       `json:"name"`
	Declared *limitValues `json:"declared"`
	Override *limitValues `json:"override"`
	// InForce is the override, else the declaration; nil when no engine
	// declares the limit (an override then applies to nothing).
	InForce  *limitValues   `json:"in_force"`
	Applies  bool           `json:"applies"`
	Counters []limitCounter `json:"counters"`
	// DeclarationStale is set when no running engine has declared the
	// limit for store.DeclarationStale: not since Declared.UpdatedAt.
	DeclarationStale bool `json:"declaration_stale,omitempty"`
}

// limitList is what idem limits ls --json prints.
type limitList struct {
	Limits []limitView `json:"limits"`
}

func valuesOf(l *store.Limit) *limitValues {
	return &limitValues{Concurrency: l.Concurrency, Rate: l.Rate, Burst: l.Burst, UpdatedAt: l.UpdatedAt}
}

// limitViews merges the declarations, the overrides and the counters in
// use, by name (byte order), one view per name any of them knows; a
// declaration older than store.DeclarationStale at now is marked.
func limitViews(declared, overrides []store.Limit, uses []store.LimitUse, now time.Time) []limitView {
	byName := map[string]*limitView{}
	view := func(name string) *limitView {
		if byName[name] == nil {
			byName[name] = &limitView{Name: name, Counters: []limitCounter{}}
		}
		return byName[name]
	}
	for i := range declared {
		v := view(declared[i].Name)
		v.Declared = valuesOf(&declared[i])
		v.DeclarationStale = store.DeclarationIsStale(declared[i].UpdatedAt, now)
	}
	for i := range overrides {
		view(overrides[i].Name).Override = valuesOf(&overrides[i])
	}
	for _, u := range uses {
		v := view(u.Name)
		v.Counters = append(v.Counters, limitCounter{Key: u.Key, InFlight: u.InFlight, Tokens: u.Tokens, Waiting: u.Waiting})
	}
	out := make([]limitView, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		v := byName[name]
		v.Applies = v.Declared != nil
		switch {
		case v.Override != nil && v.Applies:
			in := *v.Override
			v.InForce = &in
		case v.Declared != nil:
			in := *v.Declared
			v.InForce = &in
		}
		if v.InForce != nil {
			v.InForce.UpdatedAt = time.Time{}
		}
		out = append(out, *v)
	}
	return out
}

// describe is a limit's values in words: "cap 5, 20/s burst 10",
// "unlimited" when it has neither kind, "-" for none.
func (v *limitValues) describe() string {
	if v == nil {
		return "-"
	}
	var parts []string
	if v.Concurrency > 0 {
		parts = append(parts, "cap "+strconv.Itoa(v.Concurrency))
	}
	if v.Rate > 0 {
		parts = append(parts, strconv.FormatFloat(v.Rate, 'g', -1, 64)+"/s burst "+strconv.Itoa(max(v.Burst, 1)))
	}
	if len(parts) == 0 {
		return "unlimited"
	}
	return strings.Join(parts, ", ")
}

// limiterOf opens the store the flags name as a store.Limiter; the
// returned close closes it.
func limiterOf(ctx context.Context, sf *storeFlags) (store.Limiter, func() error, error) {
	st, _, err := sf.open(ctx, false)
	if err != nil {
		return nil, nil, err
	}
	l, ok := st.(store.Limiter)
	if !ok {
		st.Close()
		return nil, nil, failed(fmt.Errorf("store %T keeps no limits", st))
	}
	return l, st.Close, nil
}

// readLimits reads what idem limits ls shows.
func readLimits(ctx context.Context, l store.Limiter) ([]limitView, error) {
	declared, err := l.DeclaredLimits(ctx)
	if err != nil {
		return nil, failed(fmt.Errorf("read the declared limits: %w", err))
	}
	overrides, err := l.Limits(ctx)
	if err != nil {
		return nil, failed(fmt.Errorf("read the limits' overrides: %w", err))
	}
	uses, err := l.LimitUses(ctx)
	if err != nil {
		return nil, failed(fmt.Errorf("read the limits' use: %w", err))
	}
	return limitViews(declared, overrides, uses, time.Now()), nil
}

func newLimitsLs() *cobra.Command {
	var sf storeFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List the limits: declared, overridden, in force, and their use",
		Long: `List every limit the store knows, by name: the values the engines declare
(Config.Limits, recorded while they run), the override (idem limits set;
"-" for none), the values in force (the override, else the declaration)
and how many messages hold it now (IN FLIGHT, over all its counters) and
wait for it (WAITING). An override of a name no engine declares
applies to nothing, and says so. Then one row per counter in use (a partitioned
limit has one per key; KEY "-" is an unpartitioned limit's one counter):
its messages in flight, the tokens its bucket holds now ("-" without a
rate), and the queue's messages waiting for admission on it: those an
admitting receive looked at and could not admit, and those behind them
of their saga key (a backlog deeper than a receive looks at is
undercounted; beside a broker nothing is counted).

A "cap" is a concurrency cap, "R/s burst B" a rate limit. A running
engine declares its limits again every 10s at most, so a declaration's
time (in --json) is when a running engine last declared it. One that no
running engine declared for 30s is noted "not declared by a running
engine since T" (its code was most likely removed), and the engines'
sweeper deletes it later (after Config.LimitCounterIdle, 100s at least);
an override stays until idem limits reset.

--json prints {"limits": [...]}, each with name, declared, override and
in_force (null when absent; rate per second), applies, counters (key,
in_flight, tokens, waiting), and declaration_stale (true for such a declaration).
` + storeHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, closeStore, err := limiterOf(cmd.Context(), &sf)
			if err != nil {
				return err
			}
			defer closeStore()
			views, err := readLimits(cmd.Context(), l)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), limitList{Limits: views})
			}
			if len(views) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no limits: no engine declares one (Config.Limits) and none is overridden")
				return nil
			}
			return printLimits(cmd.OutOrStdout(), views)
		},
	}
	sf.registerReadOnly(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

func printLimits(w io.Writer, views []limitView) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tIN FORCE\tDECLARED\tOVERRIDE\tIN FLIGHT\tWAITING\tNOTE")
	counters := false
	for _, v := range views {
		inFlight, waiting, note := 0, 0, ""
		for _, c := range v.Counters {
			inFlight, waiting = inFlight+c.InFlight, waiting+c.Waiting
			counters = true
		}
		switch {
		case v.DeclarationStale:
			note = "not declared by a running engine since " + v.Declared.UpdatedAt.UTC().Format(time.RFC3339)
		case !v.Applies && v.Override != nil:
			note = "override applies to nothing: no engine declares this limit"
		case !v.Applies:
			note = "no engine declares this limit: counters in use only"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", clean(v.Name), v.InForce.describe(), v.Declared.describe(), v.Override.describe(), inFlight, waiting, note)
	}
	if counters {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "LIMIT\tKEY\tIN FLIGHT\tTOKENS\tWAITING")
		for _, v := range views {
			for _, c := range v.Counters {
				key, tokens := "-", "-"
				if c.Key != "" {
					key = clean(c.Key)
				}
				if v.InForce != nil && v.InForce.Rate > 0 {
					tokens = strconv.FormatFloat(c.Tokens, 'f', 2, 64)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\n", clean(v.Name), key, c.InFlight, tokens, c.Waiting)
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("write the limits: %w", err)
	}
	return nil
}

// limitName refuses, as a usage error, a name no store keeps.
func limitName(name string) error {
	if err := store.ValidateLimitText("Name", name); err != nil {
		return usageErrorf("%v: give the limit's name as idem limits ls shows it", err)
	}
	return nil
}

func newLimitsSet() *cobra.Command {
	var sf storeFlags
	var concurrency, burst int
	var rate float64
	cmd := &cobra.Command{
		Use:   "set NAME [--concurrency N] [--rate R] [--burst B]",
		Short: "Override a limit's values on every replica, live",
		Long: `Create or replace the override of the limit NAME: the replicas put it in
force within their Config.LimitsInterval (1s by default), with nothing
drained first. Give at least one of:

  --concurrency N  the most messages in flight at once, across replicas (0: no cap)
  --rate R         admissions per second across replicas (0: no rate limit)
  --burst B        the rate's bucket size (below 1 with a rate: 1)

A flag not given keeps the value the code declares (idem limits ls,
DECLARED), not the previous override's: the override is replaced whole.
Holds taken under the old values stay until their messages settle: a
lowered cap admits nothing new until the messages in flight fall below it.
An override of a name no engine declares is kept, and applies to nothing
until one does. Remove the override with idem limits reset NAME.
` + storeHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := limitName(name); err != nil {
				return err
			}
			fl := cmd.Flags()
			if !fl.Changed("concurrency") && !fl.Changed("rate") && !fl.Changed("burst") {
				return usageErrorf("give --concurrency, --rate or --burst (or remove the override with %s)", onStore(cmd, "idem limits reset", hintWord(name)))
			}
			if err := checkLimitFlags(concurrency, rate, burst); err != nil {
				return err
			}
			return setLimit(cmd, &sf, name, func(l *store.Limit) {
				if fl.Changed("concurrency") {
					l.Concurrency = concurrency
				}
				if fl.Changed("rate") {
					l.Rate = rate
				}
				if fl.Changed("burst") {
					l.Burst = burst
				}
			})
		},
	}
	sf.register(cmd)
	cmd.Flags().IntVar(&concurrency, "concurrency", 0, "the most messages in flight at once across replicas, 0 for no cap (default: the declared value)")
	cmd.Flags().Float64Var(&rate, "rate", 0, "admissions per second across replicas, 0 for no rate limit (default: the declared value)")
	cmd.Flags().IntVar(&burst, "burst", 0, "the rate's bucket size (default: the declared value)")
	return cmd
}

// checkLimitFlags refuses values no store keeps, naming the flag.
func checkLimitFlags(concurrency int, rate float64, burst int) error {
	switch {
	case concurrency < 0:
		return usageErrorf("--concurrency is %d: give 0 (no cap) or more", concurrency)
	case rate < 0 || math.IsNaN(rate) || math.IsInf(rate, 0):
		return usageErrorf("--rate is %v: give 0 (no rate limit) or a finite number of admissions per second", rate)
	case burst < 0:
		return usageErrorf("--burst is %d: give 0 or more", burst)
	}
	return nil
}

// setLimit sets the override of name: the declared values changed by
// change. It prints what is in force now.
func setLimit(cmd *cobra.Command, sf *storeFlags, name string, change func(*store.Limit)) error {
	ctx := cmd.Context()
	l, closeStore, err := limiterOf(ctx, sf)
	if err != nil {
		return err
	}
	defer closeStore()
	declared, err := l.DeclaredLimits(ctx)
	if err != nil {
		return failed(fmt.Errorf("read the declared limits: %w", err))
	}
	over := store.Limit{Name: name}
	i := slices.IndexFunc(declared, func(d store.Limit) bool { return d.Name == name })
	if i >= 0 {
		over = declared[i]
		over.UpdatedAt = time.Time{}
	}
	change(&over)
	if err := l.SetLimit(ctx, over); err != nil {
		return failed(fmt.Errorf("set limit %s: %w", clean(name), err))
	}
	out := cmd.OutOrStdout()
	if i < 0 {
		fmt.Fprintf(out, "limit %s overridden: %s\n", clean(name), valuesOf(&over).describe())
		fmt.Fprintf(cmd.ErrOrStderr(), "no engine declares limit %s (Config.Limits): the override applies to nothing until one does; see %s\n", clean(name), onStore(cmd, "idem limits ls"))
		return nil
	}
	fmt.Fprintf(out, "limit %s in force: %s (declared: %s)\n", clean(name), valuesOf(&over).describe(), valuesOf(&declared[i]).describe())
	fmt.Fprintln(out, "the replicas put it in force within their Config.LimitsInterval (1s by default)")
	return nil
}

func newLimitsReset() *cobra.Command {
	var sf storeFlags
	cmd := &cobra.Command{
		Use:   "reset NAME",
		Short: "Remove a limit's override: the declared values are in force again",
		Long: `Remove the override of the limit NAME: the replicas put the values the code
declares back in force within their Config.LimitsInterval (1s by default).
A name with no override is not an error (exit 0, and it says so).
` + storeHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if err := limitName(name); err != nil {
				return err
			}
			return resetLimit(cmd, &sf, name)
		},
	}
	sf.register(cmd)
	return cmd
}

// resetLimit removes the override of name and prints what is in force
// now.
func resetLimit(cmd *cobra.Command, sf *storeFlags, name string) error {
	ctx := cmd.Context()
	l, closeStore, err := limiterOf(ctx, sf)
	if err != nil {
		return err
	}
	defer closeStore()
	views, err := readLimits(ctx, l)
	if err != nil {
		return err
	}
	i := slices.IndexFunc(views, func(v limitView) bool { return v.Name == name })
	out := cmd.OutOrStdout()
	if i < 0 || views[i].Override == nil {
		fmt.Fprintf(out, "limit %s has no override: nothing to reset\n", clean(name))
		return nil
	}
	if err := l.ResetLimit(ctx, name); err != nil {
		return failed(fmt.Errorf("reset limit %s: %w", clean(name), err))
	}
	if views[i].Declared == nil {
		fmt.Fprintf(out, "removed the override of limit %s; no engine declares it\n", clean(name))
		return nil
	}
	fmt.Fprintf(out, "removed the override of limit %s; in force: %s (declared)\n", clean(name), views[i].Declared.describe())
	fmt.Fprintln(out, "the replicas put it in force within their Config.LimitsInterval (1s by default)")
	return nil
}

package cli

import (
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// newSagasEnd is `idem sagas end TYPE KEY --reason R`, or by filter:
// `idem sagas end --saga-type T … --reason R --dry-run`, then `… --yes --digest D`.
func newSagasEnd() *cobra.Command {
	var sf storeFlags
	var o endOptions
	cmd := &cobra.Command{
		Use:   "end TYPE KEY --reason R [--version N] | --saga-type T [--state S] [--prefix P] [--stuck] [--attr a=v] --reason R (--dry-run | --yes --digest D)",
		Short: "End a saga, or the sagas a filter selects: move them to the final state idem.ended and cancel their timers",
		Long: `End the saga TYPE/KEY: in one transaction it moves to the final state
idem.ended, its timers (its requests' deadlines included) are cancelled, and
the journal records the reason and who ended it (cli: user@host). Every
event that arrives for it afterwards is ignored. --version N ends it only if
it is still at version N (see idem sagas show).

Without TYPE KEY, the filter flags select active sagas (at most 1,000):
--dry-run counts them and prints a digest of the set; --yes --digest D then
ends exactly that set, each saga at the version counted, and refuses when
the filter selects another set since (count again).

Exits 1 when there is no such saga, it has finished already, it changed
meanwhile, or the set changed since the count.
` + storeHelp,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 0 && len(args) != 2 {
				return usageErrorf("give TYPE KEY, or no argument and filter flags")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			o.end = inspect.End{Reason: o.end.Reason, Actor: cliActor(), Version: o.end.Version, Now: time.Now()}
			if len(args) == 2 {
				if o.dryRun || o.yes || o.digest != "" || o.q.SagaType != "" || o.q.State != "" || o.q.KeyPrefix != "" || o.q.Stuck || len(o.attrs) > 0 {
					return usageErrorf("TYPE KEY names one saga: drop --dry-run, --yes, --digest and the filter flags, or drop TYPE KEY to end by filter")
				}
				return endOne(cmd, st, args, &o.end)
			}
			return endMany(cmd, st, &o)
		},
	}
	sf.register(cmd)
	f := cmd.Flags()
	f.StringVar(&o.end.Reason, "reason", "", "why the saga is ended (required; the journal keeps it)")
	f.Int64Var(&o.end.Version, "version", 0, "end it only if it is still at this version")
	typeFlags(cmd, &o.q.SagaType, nil, "by filter: sagas of this saga type", "")
	f.StringVar(&o.q.State, "state", "", "by filter: sagas in this state")
	f.StringVar(&o.q.KeyPrefix, "prefix", "", "by filter: sagas whose key starts with this")
	f.BoolVar(&o.q.Stuck, "stuck", false, "by filter: the stuck view's sagas")
	f.StringArrayVar(&o.attrs, "attr", nil, "by filter: a business attribute name=value (repeatable, ANDed)")
	f.BoolVar(&o.dryRun, "dry-run", false, "by filter: count the sagas and print the digest; end none")
	f.BoolVar(&o.yes, "yes", false, "by filter: end the set --digest names")
	f.StringVar(&o.digest, "digest", "", "by filter: the digest --dry-run printed")
	return cmd
}

// endOptions are the flags of idem sagas end.
type endOptions struct {
	end    inspect.End
	q      readmodel.InstanceQuery
	attrs  []string
	dryRun bool
	yes    bool
	digest string
}

func endOne(cmd *cobra.Command, st store.Store, args []string, e *inspect.End) error {
	key, err := sagaKey(args[1])
	if err != nil {
		return err
	}
	k := store.Key{SagaType: args[0], Key: key}
	entry, err := inspect.EndSaga(cmd.Context(), st, k, e)
	switch {
	case errors.Is(err, inspect.ErrBadReason):
		return usageErrorf("--reason: %v", err)
	case err != nil:
		return failed(err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "ended saga %s/%q (was %s; now version %d)\n", k.SagaType, k.Key, clean(entry.FromState), entry.Version)
	return nil
}

func endMany(cmd *cobra.Command, st store.Store, o *endOptions) error {
	var err error
	if o.q.Attributes, err = inspect.ParseAttributes(o.attrs); err != nil {
		return usageErrorf("--attr: %v", err)
	}
	o.q.KeyPrefix = canon.Prefix(o.q.KeyPrefix)
	if o.q.SagaType == "" && o.q.State == "" && o.q.KeyPrefix == "" && !o.q.Stuck && len(o.q.Attributes) == 0 {
		return usageErrorf("give TYPE KEY, or at least one filter flag (--saga-type, --state, --prefix, --stuck, --attr)")
	}
	if o.dryRun == o.yes || (o.yes && o.digest == "") {
		return usageErrorf("by filter, give --dry-run to count, then --yes --digest D to end what was counted")
	}
	if o.dryRun {
		sel, err := inspect.SelectSagas(cmd.Context(), st, &o.q)
		if err != nil {
			return failed(err)
		}
		if sel.Capped {
			return failed(inspect.ErrCapped)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%d sagas selected; to end exactly these: %s\n", len(sel.Sagas),
			rerun(cmd, []string{"dry-run", "yes", "digest"}, "--yes", "--digest", hintWord(sel.Digest)))
		return nil
	}
	res, err := inspect.EndSagas(cmd.Context(), st, &o.q, o.digest, &o.end)
	switch {
	case errors.Is(err, inspect.ErrBadReason):
		return usageErrorf("--reason: %v", err)
	case err != nil:
		return failed(err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "ended %d sagas; %d moved on since the count and were left as they are", res.Done, len(res.Skipped))
	if res.Gone > 0 {
		fmt.Fprintf(cmd.OutOrStdout(), "; %d no longer match the filter (finished, or changed) and were left as they are", res.Gone)
	}
	fmt.Fprintln(cmd.OutOrStdout())
	return nil
}

package cli

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/canon"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

func newTimers() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "timers",
		Short: "List, cancel and reschedule saga timers",
		Long: `Timers are rows beside saga state: a saga schedules one by name and the engine
fires it when due. These commands work on the store directly, like the
console's Timers page and the admin API's /api/timers routes.`,
	}
	cmd.AddCommand(newTimersLs(), newTimersCancel(), newTimersReschedule())
	return cmd
}

func newTimersLs() *cobra.Command {
	var sf storeFlags
	var f inspect.TimerFilter
	var overdue, asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [--saga-type T] [--key K] [--overdue] [--limit N] [--after CURSOR] [--json]",
		Short: "List timers, soonest due first",
		Long:  "List timers in due order; --saga-type keeps the timers of one saga type, --overdue those already past due, --key those of one saga key (in any Unicode spelling). --limit is the page size (default 100, at most 1000). When a page is full, the command for the next one is printed on stderr, with your flags and a shell-safe cursor.\n" + storeHelp,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			now := time.Now()
			f.Key = canon.Lookup(f.Key)
			if overdue {
				f.DueBefore = now
			}
			ts, next, err := inspect.Timers(ctx, st, &f)
			if errors.Is(err, inspect.ErrBadCursor) {
				return usageErrorf("--after: %v", err)
			}
			if err != nil {
				return failed(err)
			}
			if err := writeTimers(cmd.OutOrStdout(), ts, now, asJSON); err != nil {
				return failed(err)
			}
			if next != "" {
				fmt.Fprint(cmd.ErrOrStderr(), moreHint(cmd, next))
			}
			return nil
		},
	}
	sf.registerReadOnly(cmd)
	typeFlags(cmd, &f.SagaType, nil, "only timers of this saga type", "")
	cmd.Flags().StringVar(&f.Key, "key", "", "only timers of this saga key")
	cmd.Flags().BoolVar(&overdue, "overdue", false, "only timers already past due")
	limitFlag(cmd, &f.Limit, 100, "page size")
	cmd.Flags().StringVar(&f.After, "after", "", "cursor printed by the previous page")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

// timerJSON is the --json form of a timer: its envelope as idem dlq ls
// --json and the API give it (see admin.Envelope).
type timerJSON struct {
	SagaType string           `json:"saga_type"`
	Key      string           `json:"key"`
	Name     string           `json:"name"`
	DueAt    time.Time        `json:"due_at"`
	Overdue  bool             `json:"overdue"`
	Envelope inspect.Envelope `json:"envelope"`
}

// writeTimers prints a page of timers ls: a JSON array, a table, or
// "no timers".
func writeTimers(w io.Writer, ts []store.Timer, now time.Time, asJSON bool) error {
	if asJSON {
		out := make([]timerJSON, len(ts))
		for i := range ts {
			t := &ts[i]
			out[i] = timerJSON{SagaType: t.SagaType, Key: t.Key, Name: t.Name, DueAt: t.DueAt.UTC(), Overdue: t.DueAt.Before(now), Envelope: inspect.EnvelopeOf(&t.Envelope)}
		}
		return writeJSON(w, out)
	}
	if len(ts) == 0 {
		_, err := fmt.Fprintln(w, "no timers")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SAGA TYPE\tKEY\tNAME\tDUE\tOVERDUE\tMESSAGE TYPE")
	for _, t := range ts {
		late := "-"
		if t.DueAt.Before(now) {
			late = now.Sub(t.DueAt).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%q\t%s\t%s\t%s\t%s\n", clean(t.SagaType), t.Key, clean(t.Name), t.DueAt.UTC().Format(time.RFC3339), late, clean(t.Envelope.Type))
	}
	return tw.Flush()
}

// timerArgs reads TYPE KEY NAME.
func timerArgs(args []string) (store.TimerKey, error) {
	key, err := sagaKey(args[1])
	if err != nil {
		return store.TimerKey{}, err
	}
	return store.TimerKey{SagaType: args[0], Key: key, Name: args[2]}, nil
}

func newTimersCancel() *cobra.Command {
	var sf storeFlags
	cmd := &cobra.Command{
		Use:   "cancel TYPE KEY NAME",
		Short: "Delete a timer so that it never fires (the saga sees no timeout)",
		Long:  "Delete the timer NAME of saga TYPE/KEY. The saga's state is not changed. Exits 1 when there is no such timer.\n" + storeHelp,
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := timerArgs(args)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			if err := inspect.CancelTimer(ctx, st, k); err != nil {
				return failed(timerErr(cmd, err, k))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "cancelled timer %s of %s/%q\n", clean(k.Name), k.SagaType, k.Key)
			return nil
		},
	}
	sf.register(cmd)
	return cmd
}

func newTimersReschedule() *cobra.Command {
	var sf storeFlags
	var in, at string
	cmd := &cobra.Command{
		Use:   "reschedule TYPE KEY NAME --in DURATION | --at TIME",
		Short: "Move a timer's due time, keeping the message it fires",
		Long:  "Move the timer NAME of saga TYPE/KEY to --in from now (10m, 0s for at once) or --at an RFC 3339 time. Exits 1 when there is no such timer.\n" + storeHelp,
		Args:  cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			k, err := timerArgs(args)
			if err != nil {
				return err
			}
			var r struct{ due time.Time }
			switch {
			case (in == "") == (at == ""):
				return usageErrorf("give --in DURATION or --at TIME, one of them")
			case in != "":
				d, err := time.ParseDuration(in)
				if err != nil || d < 0 {
					return usageErrorf("--in %q: want a duration like 10m or 0s", in)
				}
				r.due = time.Now().Add(d)
			default:
				if r.due, err = time.Parse(time.RFC3339, at); err != nil {
					return usageErrorf("--at %q: want an RFC 3339 time like 2026-01-02T15:04:05Z", at)
				}
			}
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			t, err := inspect.RescheduleTimer(ctx, st, k, r.due)
			if err != nil {
				return failed(timerErr(cmd, err, k))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "timer %s of %s/%q now due %s\n", clean(k.Name), k.SagaType, k.Key, t.DueAt.Format(time.RFC3339))
			return nil
		},
	}
	sf.register(cmd)
	cmd.Flags().StringVar(&in, "in", "", "due this long from now (10m, 2h, 0s)")
	cmd.Flags().StringVar(&at, "at", "", "due at this RFC 3339 time")
	return cmd
}

func timerErr(cmd *cobra.Command, err error, k store.TimerKey) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("no timer %s of saga %s/%q: list them with %s", clean(k.Name), clean(k.SagaType), k.Key, onStore(cmd, "idem timers ls", "--saga-type", hintWord(k.SagaType)))
	}
	return err
}

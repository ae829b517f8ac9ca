package cli

import (
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
)

func newSchedules() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedules",
		Short: "List, pause, resume, delete and fire recurring schedules",
		Long: `Schedules are registered by the engines (Engine.Every, Engine.Cron) and kept in
the store. These commands work on the store directly, like the admin API's
/api/schedules routes. A paused schedule stays paused across restarts; on
resume, the ticks it missed follow its missed-tick policy. fire needs the
running engine's transport, so it goes through the engine's admin API
(--api, IDEM_API_URL): see idem schedules fire --help.`,
	}
	cmd.AddCommand(newSchedulesLs(), newSchedulesPause(true), newSchedulesPause(false), newSchedulesDelete(), newSchedulesFire())
	return cmd
}

func newSchedulesLs() *cobra.Command {
	var sf storeFlags
	var p store.ListParams
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "ls [--limit N] [--after NAME] [--json]",
		Short: "List schedules by name",
		Long: `List schedules by name with their spec, policy, next tick and last fired
tick. --limit is the page size (default 100, at most 1000); when a page is
full, the command for the next one is printed on stderr, with your flags.

--json prints a JSON array of the schedules; each envelope's body is the
JSON itself when it is JSON ("body_encoding": "json"), else a string: its
text when it is valid UTF-8 ("utf-8"), its standard base64 otherwise
("base64"), as in idem timers ls --json and idem dlq ls --json.
` + storeHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			sc, err := scheduler(st)
			if err != nil {
				return err
			}
			list, err := sc.ListSchedules(ctx, &p)
			if err != nil {
				return failed(err)
			}
			if asJSON {
				return writeSchedulesJSON(cmd.OutOrStdout(), list)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tSPEC\tMISSED\tSTATUS\tNEXT\tLAST\tMESSAGE")
			for _, s := range list {
				status, last := "active", "-"
				if s.Paused {
					status = "paused"
				}
				if !s.LastTick.IsZero() {
					last = s.LastTick.UTC().Format(time.RFC3339Nano)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", clean(s.Name), clean(s.Spec), s.Missed, status, s.NextDue.UTC().Format(time.RFC3339Nano), last, clean(s.Envelope.Type))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(list) == p.Limit {
				fmt.Fprint(cmd.ErrOrStderr(), moreHint(cmd, list[len(list)-1].Name))
			}
			return nil
		},
	}
	sf.registerReadOnly(cmd)
	limitFlag(cmd, &p.Limit, 100, "page size")
	cmd.Flags().StringVar(&p.After, "after", "", "last name of the previous page")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON for scripts")
	return cmd
}

// scheduleJSON is a schedule as schedules ls --json prints it: the
// store's fields, with the envelope as the API gives envelopes.
type scheduleJSON struct {
	*store.Schedule
	Envelope inspect.Envelope `json:"envelope"`
}

func writeSchedulesJSON(w io.Writer, list []store.Schedule) error {
	out := make([]scheduleJSON, len(list))
	for i := range list {
		out[i] = scheduleJSON{Schedule: &list[i], Envelope: inspect.EnvelopeOf(&list[i].Envelope)}
	}
	return writeJSON(w, out)
}

func newSchedulesPause(pause bool) *cobra.Command {
	var sf storeFlags
	use, short, done := "pause NAME", "Stop a schedule from firing, across restarts", "paused"
	if !pause {
		use, short, done = "resume NAME", "Let a paused schedule fire again (missed ticks follow its policy)", "resumed"
	}
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long:  short + ". Exits 1 when there is no such schedule.\n" + storeHelp,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onSchedule(cmd, &sf, args[0], func(sc store.Scheduler) error {
				return sc.PauseSchedule(cmd.Context(), args[0], pause, time.Now())
			}, done)
		},
	}
	sf.register(cmd)
	return cmd
}

func newSchedulesDelete() *cobra.Command {
	var sf storeFlags
	cmd := &cobra.Command{
		Use:   "delete NAME",
		Short: "Delete a schedule (an engine that registers it again at start-up recreates it)",
		Long:  "Delete the schedule NAME. Exits 1 when there is no such schedule.\n" + storeHelp,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return onSchedule(cmd, &sf, args[0], func(sc store.Scheduler) error {
				return sc.DeleteSchedule(cmd.Context(), args[0])
			}, "deleted")
		},
	}
	sf.register(cmd)
	return cmd
}

// onSchedule validates name, opens the store and runs fn on its schedules.
func onSchedule(cmd *cobra.Command, sf *storeFlags, name string, fn func(store.Scheduler) error, done string) error {
	if err := idem.ValidateScheduleName(name); err != nil {
		return usageErrorf("%v", err)
	}
	st, _, err := sf.open(cmd.Context(), false)
	if err != nil {
		return err
	}
	defer st.Close()
	sc, err := scheduler(st)
	if err != nil {
		return err
	}
	if err := fn(sc); errors.Is(err, store.ErrNotFound) {
		return failed(fmt.Errorf("no schedule %s: list them with %s", strconv.Quote(name), onStore(cmd, "idem schedules ls")))
	} else if err != nil {
		return failed(err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s schedule %s\n", done, clean(name))
	return nil
}

func scheduler(st store.Store) (store.Scheduler, error) {
	sc, ok := st.(store.Scheduler)
	if !ok {
		return nil, failed(fmt.Errorf("store %T keeps no schedules", st))
	}
	return sc, nil
}

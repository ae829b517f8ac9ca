package cli

import (
	"cmp"
	"fmt"
	"os"
	"os/user"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
)

// newDLQGroups is `idem dlq groups`.
func newDLQGroups() *cobra.Command {
	var (
		sf       storeFlags
		sel      selection
		archived string
		limit    int
		asJSON   bool
	)
	cmd := &cobra.Command{
		Use:   "groups [--saga-type T] [--message-type M] [--reason R] [--state S] [--archived exclude|only|include] [--limit N] [--json]",
		Short: "Group dead letters by the fingerprint of their failure",
		Long: `Group dead letters that failed alike: same reason, and the same first line
of the error once IDs, UUIDs, hex, numbers and quoted values are masked
(their fingerprint). Prints the largest groups first: fingerprint, reason,
count, first and last failure (UTC) and the masked error.

Act on a group with idem dlq replay --all --fingerprint F, or idem dlq
archive --all --fingerprint F. Dead letters recorded before fingerprints
form the group "none" (--fingerprint none).

--saga-type, --message-type, --reason and --state (unresolved by default, pending, resolved
or all) narrow the dead letters grouped; --archived only groups the archived
ones, include both. --limit bounds the groups (default 50, at most 1000). --json prints a
JSON object {"groups": [...]}, as GET /api/dead-letters/groups does.
` + storeHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := readmodel.ParseArchivedFilter(archived)
			if err != nil {
				return usageErrorf("--archived: %v", err)
			}
			if _, err := store.ParseDeadLetterState(sel.state); err != nil {
				return usageErrorf("--state: %v", err)
			}
			sel.archived = a
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			gs, err := inspect.Groups(ctx, st, sel.filter(), limit)
			if err != nil {
				return failed(err)
			}
			out := admin.DeadLetterGroups{Groups: make([]admin.DeadLetterGroup, 0, len(gs))}
			for i := range gs {
				g := &gs[i]
				out.Groups = append(out.Groups, admin.DeadLetterGroup{Fingerprint: g.Fingerprint, Reason: g.Reason, Pattern: store.MaskError(g.SampleError),
					SampleError: g.SampleError, Count: g.Count, FirstSeen: g.FirstSeen.UTC(), LastSeen: g.LastSeen.UTC()})
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			if len(gs) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no dead letters")
				return nil
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "FINGERPRINT\tREASON\tCOUNT\tFIRST SEEN\tLAST SEEN\tERROR")
			for _, g := range out.Groups {
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", clean(cmp.Or(g.Fingerprint, "none")), clean(g.Reason), g.Count,
					formatTime(g.FirstSeen), formatTime(g.LastSeen), clean(firstLine(g.Pattern)))
			}
			return tw.Flush()
		},
	}
	typeFlags(cmd, &sel.sagaType, &sel.msgType, "only dead letters of this saga type", "only dead letters of this message type")
	cmd.Flags().StringVar(&sel.reason, "reason", "", "only dead letters with this reason")
	cmd.Flags().StringVar(&sel.state, "state", "", "select by the latest replay: unresolved (default), pending, resolved or all")
	cmd.Flags().StringVar(&archived, "archived", "", "exclude (default), only or include the archived dead letters")
	limitFlag(cmd, &limit, 50, "at most this many groups")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, as GET /api/dead-letters/groups")
	sf.registerReadOnly(cmd)
	return cmd
}

// newDLQArchive is `idem dlq archive` (action "archive") or `idem dlq
// restore` (action "restore").
func newDLQArchive(action string) *cobra.Command {
	var (
		sf     storeFlags
		sel    selection
		yes    bool
		dryRun bool
	)
	past := map[string]string{"archive": "archived", "restore": "restored"}[action]
	cmd := &cobra.Command{
		Use: action + " ID... | --all [--reason R] [--saga-type T] [--message-type M] [--fingerprint F] [--state S] (--dry-run | --yes [--as-of MARK])",
		Short: map[string]string{
			"archive": "Archive dead letters: keep them, out of the default lists",
			"restore": "Restore archived dead letters to the default lists",
		}[action],
		Long: map[string]string{
			"archive": `Archive dead letters instead of purging them: an archived dead letter keeps
its envelope, error and replay history, leaves the default lists (the
console's, the API's filtered list, idem dlq groups) and can be restored
with idem dlq restore. One whose message fails again is restored by itself.
`,
			"restore": `Restore archived dead letters: they come back to the default lists.
`,
		}[action] + `
Name the dead letters by ID (they are acted on at once: --dry-run, --yes,
--as-of and the filters go with --all only, exit 2 with IDs), or pass --all to act on every dead letter the
filters select (` + map[string]string{"archive": "those not archived", "restore": "among the archived"}[action] + `), which needs --yes:
--reason, --saga-type, --message-type, --fingerprint (a group of idem dlq groups; none for
those recorded before fingerprints) and --state (unresolved by default,
pending, resolved or all). --dry-run counts them, changes nothing, and ends
with the command that acts on exactly those (--as-of MARK): a dead letter
recorded, or failed again, after the count is left alone.

Prints how many dead letters were ` + past + `.
` + storeHelp,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sel.check(cmd, args); err != nil {
				return err
			}
			if sel.all && !yes && !dryRun {
				return usageErrorf("%s --all acts on every dead letter the filters select: add --yes to confirm, or --dry-run to count them first", action)
			}
			if action == "restore" {
				sel.archived = readmodel.ArchivedOnly
			}
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			ar, err := inspect.Archiver(st)
			if err != nil {
				return failed(err)
			}
			out := cmd.OutOrStdout()
			if !sel.all {
				ids := uniq(args)
				var n int
				if action == "archive" {
					n, err = ar.ArchiveDeadLetters(ctx, &readmodel.ArchiveParams{IDs: ids})
				} else {
					n, err = ar.RestoreDeadLetters(ctx, &readmodel.ArchiveParams{IDs: ids})
				}
				if err != nil {
					return failed(fmt.Errorf("%s dead letters: %w", action, err))
				}
				fmt.Fprintf(out, "%s %s\n", past, deadLetters(n))
				if n < len(ids) {
					return failed(fmt.Errorf("%d of the %s named did not exist or were already %s", len(ids)-n, deadLetters(len(ids)), past))
				}
				return nil
			}
			if err := sel.bound(ctx, st); err != nil {
				return err
			}
			total := 0
			err = sel.each(ctx, st, time.Time{}, func(page []store.DeadLetter) error {
				if dryRun {
					total += len(page)
					return nil
				}
				var n int
				var err error
				if action == "archive" {
					n, err = inspect.ArchiveDeadLetters(ctx, st, sel.filter(), page)
				} else {
					ids := make([]string, len(page))
					for i := range page {
						ids[i] = page[i].ID
					}
					n, err = inspect.RestoreDeadLetters(ctx, st, ids, sel.filter().AsOf)
				}
				total += n
				if err != nil {
					return failed(err)
				}
				return nil
			})
			if dryRun {
				fmt.Fprintf(out, "would have %s %s (dry run: nothing changed)\n%s\n", past, deadLetters(total), asOfHint(cmd, &sel))
				return err
			}
			fmt.Fprintf(out, "%s %s\n", past, deadLetters(total))
			return err
		},
	}
	cmd.Flags().BoolVar(&sel.all, "all", false, "act on every dead letter the filters select (needs --yes)")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm --all")
	cmd.Flags().StringVar(&sel.reason, "reason", "", "with --all: only dead letters with this reason")
	typeFlags(cmd, &sel.sagaType, &sel.msgType, "with --all: only dead letters of this saga type", "with --all: only dead letters of this message type")
	cmd.Flags().StringVar(&sel.fingerprint, "fingerprint", "", "with --all: only the dead letters of this group (idem dlq groups), none for those recorded before fingerprints")
	cmd.Flags().StringVar(&sel.state, "state", "", "with --all: select by the latest replay: unresolved (default), pending, resolved or all")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "with --all: count what would be "+past+" and print the --as-of that binds it; change nothing")
	cmd.Flags().StringVar(&sel.asOf, "as-of", "", "with --all: act only on the dead letters counted by the dry run that printed this mark")
	sf.register(cmd)
	return cmd
}

// cliActor is who replays from this command line, as the dead letter's
// history records it: "cli: user@host", or "cli" when neither is known.
func cliActor() string {
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	if h, err := os.Hostname(); err == nil && h != "" {
		name += "@" + h
	}
	if name == "" {
		return "cli"
	}
	return "cli: " + name
}

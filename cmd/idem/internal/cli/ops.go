package cli

import (
	"bytes"
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/idemhq/idem"
	"github.com/idemhq/idem/admin"
	"github.com/idemhq/idem/internal/inspect"
	"github.com/idemhq/idem/store"
	"github.com/idemhq/idem/store/readmodel"
	"github.com/idemhq/idem/transport"
)

// Exit codes of the operations commands, as Run documents them: 0 done, 1
// the command ran and something it was asked to do failed (a named dead
// letter does not exist, a replay failed, the database failed mid-way), 2 a
// usage or configuration problem (bad flags, no or unsupported store,
// unreachable server, schema not migrated).

// failed is an error met after the store was opened: exit code 1.
// A mark the store refused (readmodel.ErrBadMark) is the caller's: exit 2.
func failed(err error) error {
	if errors.Is(err, readmodel.ErrBadMark) {
		return usageErrorf("--as-of: %v", err)
	}
	return &exitError{code: 1, err: err}
}

// newMigrate is `idem migrate`.
func newMigrate() *cobra.Command {
	var sf storeFlags
	cmd := &cobra.Command{
		Use:   "migrate [--store postgres://user@host:port/db | sqlite:///path] [--schema idem]",
		Short: "Create or upgrade Idem's schema, in PostgreSQL or SQLite",
		Long: `Create Idem's tables in a PostgreSQL schema or a SQLite file, or apply the
migrations it lacks.
Running it again is harmless: applied migrations are skipped, and concurrent
runs take an advisory lock and wait for each other. Prints the version the
schema is at.

--store names the database as postgres://user:password@host:port/db or
sqlite:///path/to/idem.db (default from IDEM_STORE, else ` + defaultStore + `, as for
every command; the password is never printed). --schema names the schema
holding Idem's tables (default idem): one database may hold several Idem
deployments in different schemas. Idem refuses a server that acknowledges
commits before they are durable (synchronous_commit=off or fsync=off) unless
--allow-unsafe-commit accepts that a crash may lose acknowledged messages.

The role needs CREATE on the database (to create the schema) and on the
schema. Applications can instead migrate at start-up (pgstore.Config.Migrate,
or --migrate on the other commands); running migrate once from a deploy step
keeps the application's role unprivileged.

Exit status: 0 migrated, 2 no or unsupported store, server unreachable,
permission denied, or the server does not commit durably.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, v, err := sf.open(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer st.Close()
			if strings.HasPrefix(sf.url, "sqlite:") {
				fmt.Fprintf(cmd.OutOrStdout(), "database at schema version %d\n", v)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "schema %s at version %d\n", sf.schema, v)
			return nil
		},
	}
	sf.register(cmd)
	// migrate always migrates: the flag would only confuse.
	_ = cmd.Flags().MarkHidden("migrate")
	return cmd
}

// newDLQ is `idem dlq` and its subcommands.
func newDLQ() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "dlq",
		Short: "List, show, replay, group, archive, restore and purge dead letters",
		Long: `Inspect and act on dead letters: messages the engine gave up on (a malformed
body, an unknown message type, a permanent error, retries exhausted), kept
with the reason, the full error and the attempt count until an operator
replays or deletes them.

Every subcommand reads the store from --store or IDEM_STORE and the schema
from --schema (default idem); --migrate creates or upgrades the schema first,
and --allow-unsafe-commit accepts a server that does not commit durably (see
idem migrate --help). Passwords are never printed. Dead-letter IDs are message deduplication IDs;
put -- before an ID that starts with a dash.

Exit status of every subcommand: 0 done; 1 it ran and something failed (a
named dead letter does not exist, a replay failed); 2 usage or configuration
errors (bad flags, no or unsupported store, unreachable server, schema not
migrated: run idem migrate).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageErrorf("dlq needs a subcommand: ls, show, replay, purge, groups, archive or restore (see idem dlq --help)")
		},
	}
	cmd.AddCommand(newDLQList(), newDLQShow(), newDLQReplay(), newDLQPurge(), newDLQGroups(), newDLQArchive("archive"), newDLQArchive("restore"))
	return cmd
}

// storeHelp ends the Long text of every dlq subcommand.
const storeHelp = `
The store comes from --store (default IDEM_STORE, else ` + defaultStore + `) and --schema
(default idem); on the commands that change the store, --migrate creates or
upgrades the schema first (read-only commands have no --migrate);
--allow-unsafe-commit accepts a server that does not commit durably (see
idem migrate --help).`

func newDLQList() *cobra.Command {
	var (
		sf       storeFlags
		f        inspect.DeadLetterFilter
		limit    int
		after    string
		asJSON   bool
		archived string
	)
	cmd := &cobra.Command{
		Use:   "ls [--saga-type T] [--message-type M] [--archived exclude|only|include] [--limit N] [--after ID] [--json]",
		Short: "List dead letters, one page at a time, ordered by ID",
		Long: `List dead letters ordered by ID, one page at a time: a table with the ID, the
reason, the message type, the saga (type/key, or - when the message never
reached one), the number of attempts and the time of the last failure (UTC).

--saga-type keeps the dead letters of one saga type, --message-type those of
one message type (the MESSAGE TYPE column), as on every command. --limit is
the page size (default 100, at most 1000). --after is the cursor: the list
starts after that ID, so pass the last ID of the previous page. When a page
is full, a hint on stderr gives the command for the next page, with your
flags; stdout holds only the table or the JSON. Archived dead letters (idem
dlq archive) are left out: --archived only lists them, --archived include
lists both.

--json prints a JSON array instead (an empty page is []). Each element has
id, envelope, reason, error, saga_type, key, attempts, first_failed_at,
last_failed_at (RFC 3339, UTC), first_reason and first_error (the first
failure's, kept when the message fails again), replays (each replay's time,
outcome — pending, succeeded, duplicate, failed or not_sent — settled_at, and the new
failure's reason and error) and history (replays in one line). The
envelope's body is the JSON itself when it is JSON ("body_encoding":
"json"), which keeps it readable with jq, else a string: its text when it
is valid UTF-8 ("utf-8"), its standard base64 otherwise ("base64").
` + storeHelp,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			a, err := readmodel.ParseArchivedFilter(archived)
			if err != nil {
				return usageErrorf("--archived: %v", err)
			}
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			f.Archived, f.State = a, store.DeadLettersAll
			dls, next, err := inspect.DeadLetters(ctx, st, &f, after, limit)
			if err != nil {
				return failed(fmt.Errorf("list dead letters: %w", err))
			}
			if err := writeDeadLetters(cmd.OutOrStdout(), dls, asJSON); err != nil {
				return failed(err)
			}
			if next != "" {
				fmt.Fprint(cmd.ErrOrStderr(), moreHint(cmd, next))
			}
			return nil
		},
	}
	typeFlags(cmd, &f.SagaType, &f.MessageType, "only dead letters of this saga type", "only dead letters of this message type")
	limitFlag(cmd, &limit, 100, "page size")
	cmd.Flags().StringVar(&archived, "archived", "", "exclude (default), only or include the archived dead letters")
	cmd.Flags().StringVar(&after, "after", "", "list IDs after this one: the last ID of the previous page")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON array of dead letters (see body_encoding)")
	sf.registerReadOnly(cmd)
	return cmd
}

// writeDeadLetters prints a page of dlq ls: a JSON array, a table, or
// "no dead letters".
func writeDeadLetters(w io.Writer, dls []store.DeadLetter, asJSON bool) error {
	if asJSON {
		views := make([]inspect.DeadLetter, len(dls))
		for i := range dls {
			views[i] = inspect.DeadLetterOf(&dls[i])
		}
		return writeJSON(w, views)
	}
	if len(dls) == 0 {
		_, err := fmt.Fprintln(w, "no dead letters")
		return err
	}
	writeTable(w, dls)
	return nil
}

func writeTable(w io.Writer, dls []store.DeadLetter) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tREASON\tMESSAGE TYPE\tSAGA\tATTEMPTS\tLAST FAILED")
	for i := range dls {
		d := &dls[i]
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\n", clean(d.ID), clean(d.Reason), clean(d.Envelope.Type),
			sagaOf(d), d.Attempts, d.LastFailedAt.UTC().Format(time.RFC3339))
	}
	_ = tw.Flush()
}

func sagaOf(d *store.DeadLetter) string {
	if d.SagaType == "" && d.Key == "" {
		return "-"
	}
	return clean(d.SagaType + "/" + d.Key)
}

func newDLQShow() *cobra.Command {
	var (
		sf     storeFlags
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "show ID [--json]",
		Short: "Show one dead letter in full",
		Long: `Show one dead letter in full: its reason, saga, attempts and failure times, the
envelope's fields and headers, the body, the full error chain, and its
history: the first failure and every replay with its time and outcome
(pending until an engine consumes the replayed message; then succeeded, or
failed again with the new failure; or not sent).

The body is printed indented when it is JSON, as it is when it is other
printable text, and as a hex dump otherwise (binary data, or text with
control characters that could drive the terminal). Other fields holding
such characters are printed quoted.

--json prints one JSON object, in the shape of an element of idem dlq ls
--json (body as a UTF-8 string, or base64: see body_encoding).

A missing ID exits 1 with "no dead letter with ID …".
` + storeHelp,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			d, err := getDeadLetter(ctx, st, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				if err := writeJSON(cmd.OutOrStdout(), inspect.DeadLetterOf(d)); err != nil {
					return failed(err)
				}
				return nil
			}
			writeDeadLetter(cmd.OutOrStdout(), d)
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print a JSON object (body as a UTF-8 string, or base64; see body_encoding)")
	sf.registerReadOnly(cmd)
	return cmd
}

// getDeadLetter loads one dead letter; a missing one is exit code 1 with a
// message naming the ID.
func getDeadLetter(ctx context.Context, st store.Queue, id string) (*store.DeadLetter, error) {
	d, err := st.GetDeadLetter(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, failed(fmt.Errorf("no dead letter with ID %s", clean(id)))
	}
	if err != nil {
		return nil, failed(fmt.Errorf("get dead letter %s: %w", clean(id), err))
	}
	return d, nil
}

func writeDeadLetter(w io.Writer, d *store.DeadLetter) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	field := func(name, value string) { fmt.Fprintf(tw, "%s:\t%s\n", name, value) }
	field("ID", clean(d.ID))
	field("Reason", clean(d.Reason))
	field("Saga", sagaOf(d))
	field("Attempts", strconv.Itoa(d.Attempts))
	field("First failed", formatTime(d.FirstFailedAt))
	field("Last failed", formatTime(d.LastFailedAt))
	e := &d.Envelope
	field("Message ID", clean(e.ID))
	field("Type", clean(e.Type))
	field("Correlation ID", orDash(e.CorrelationID))
	field("Causation ID", orDash(e.CausationID))
	field("Idempotency key", orDash(e.IdempotencyKey))
	field("Sent at", formatTime(e.SentAt))
	_ = tw.Flush()

	if len(e.Headers) == 0 {
		fmt.Fprintln(w, "Headers: none")
	} else {
		fmt.Fprintln(w, "Headers:")
		tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		for _, k := range slices.Sorted(maps.Keys(e.Headers)) {
			fmt.Fprintf(tw, "  %s:\t%s\n", clean(k), clean(e.Headers[k]))
		}
		_ = tw.Flush()
	}

	body, kind := renderBody(e.Body)
	fmt.Fprintf(w, "Body (%d bytes, %s):\n", len(e.Body), kind)
	if body != "" {
		fmt.Fprint(w, indent(body))
	}
	fmt.Fprintln(w, "Error:")
	fmt.Fprint(w, indent(cleanText(d.Error)))
	writeHistory(w, d)
}

// renderBody returns the body as people should see it and what it is.
func renderBody(b []byte) (string, string) {
	switch {
	case len(b) == 0:
		return "", "empty"
	case !printable(string(b)):
		return hex.Dump(b), "binary, hex dump"
	case json.Valid(b):
		var buf bytes.Buffer
		if err := json.Indent(&buf, b, "", "  "); err == nil {
			return buf.String(), "JSON"
		}
	}
	return string(b), "text"
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	s = strings.TrimSuffix(s, "\n")
	return "  " + strings.ReplaceAll(s, "\n", "\n  ") + "\n"
}

func formatTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return clean(s)
}

// unsafeRune reports characters that must not reach a terminal raw:
// control characters (escape sequences, carriage returns) and the bidi
// overrides that make text read differently from what it is.
func unsafeRune(r rune) bool {
	return unicode.IsControl(r) || (r >= 0x202A && r <= 0x202E) || (r >= 0x2066 && r <= 0x2069)
}

// clean returns s for a single-line field: as it is when it is valid UTF-8
// without unsafe characters, Go-quoted otherwise. Dead letters hold what
// producers sent, which may be hostile.
func clean(s string) string {
	if utf8.ValidString(s) && !strings.ContainsFunc(s, unsafeRune) {
		return s
	}
	return strconv.Quote(s)
}

// printable reports whether s may be printed raw as multi-line text.
func printable(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool {
		return r != '\n' && r != '\t' && unsafeRune(r)
	})
}

// cleanText returns multi-line text as it is when printable, quoted
// otherwise.
func cleanText(s string) string {
	if printable(s) {
		return s
	}
	return strconv.Quote(s)
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// selection is how replay and purge choose dead letters: named IDs, or
// --all narrowed by filters.
type selection struct {
	all       bool
	sagaType  string
	reason    string
	msgType   string // the envelope's type
	olderThan string // parsed by parseAge
	// failedBefore is purge's absolute cutoff (RFC 3339), the one a dry
	// run's hint passes instead of its --older-than.
	failedBefore string
	asOf         string // the mark of a dry run's count (see bound)
	state        string // unresolved (default), pending, resolved or all
	// fingerprint and archived select as the API's filters do (archive,
	// restore; see dlq_triage.go).
	fingerprint string
	archived    readmodel.ArchivedFilter
}

// check validates args against the flags; filters need --all.
func (s *selection) check(cmd *cobra.Command, ids []string) error {
	switch {
	case s.all && len(ids) > 0:
		return usageErrorf("give dead-letter IDs or --all, not both")
	case !s.all && len(ids) == 0 && cmd.Name() == "replay" && (s.reason != "" || s.sagaType != "" || s.msgType != "" || s.asOf != "" || s.state != "" || s.fingerprint != ""):
		s.all = true // replay --reason R --message-type M selects in bulk
	case !s.all && len(ids) == 0:
		return usageErrorf("no dead letters named: give their IDs, or --all (see %s --help)", cmd.CommandPath())
	}
	if !s.all {
		if err := checkNamed(cmd); err != nil {
			return err
		}
		for _, f := range []string{"saga-type", "reason", "message-type", "older-than", "failed-before", "as-of", "state", "fingerprint", "archived"} {
			if fl := cmd.Flags().Lookup(f); fl != nil && fl.Changed {
				return usageErrorf("--%s selects among all dead letters: use it with --all", f)
			}
		}
	}
	if _, err := store.ParseDeadLetterState(s.state); err != nil {
		return usageErrorf("--state: %v", err)
	}
	return nil
}

// checkNamed refuses the confirmation flags of --all on archive, restore
// and purge of named IDs, which act at once: a --dry-run there would act
// anyway, and a --yes confirms nothing.
func checkNamed(cmd *cobra.Command) error {
	if n := cmd.Name(); n != "archive" && n != "restore" && n != "purge" {
		return nil
	}
	for _, f := range []string{"dry-run", "yes"} {
		if fl := cmd.Flags().Lookup(f); fl != nil && fl.Changed {
			return usageErrorf("--%s goes with --all: %s of named dead letters acts at once; drop --%s (idem dlq show ID shows one first), or select with --all", f, cmd.Name(), f)
		}
	}
	return nil
}

// filter is s as an inspect filter, bound to s.asOf: the unresolved dead
// letters unless --state says otherwise.
func (s *selection) filter() *inspect.DeadLetterFilter {
	return &inspect.DeadLetterFilter{SagaType: s.sagaType, Reason: s.reason, MessageType: s.msgType, AsOf: s.asOf, State: store.DeadLetterState(s.state),
		Fingerprint: s.fingerprint, Archived: s.archived}
}

// bound takes the mark of the dead letters s selects now, unless --as-of
// gave one: the command then acts on those only, never on one recorded
// (or failed again) while it runs, or since the dry run that printed the
// mark.
func (s *selection) bound(ctx context.Context, st store.Store) error {
	if s.asOf != "" {
		return nil
	}
	c, err := inspect.CountByReason(ctx, st, s.filter())
	if err != nil {
		return failed(err)
	}
	s.asOf = c.AsOf
	return nil
}

// each calls fn with every page of dead letters matching s as of its mark,
// in ID order, last failed before cutoff when it is set. A page is listed
// before fn runs, and the next page starts after the page's last ID, so
// dead letters fn deletes or records again are not visited twice.
func (s *selection) each(ctx context.Context, st store.Store, cutoff time.Time, fn func([]store.DeadLetter) error) error {
	err := inspect.EachDeadLetter(ctx, st, s.filter(), func(page []store.DeadLetter) error {
		match := page[:0]
		for _, d := range page {
			if cutoff.IsZero() || d.LastFailedAt.Before(cutoff) {
				match = append(match, d)
			}
		}
		if len(match) == 0 {
			return nil
		}
		return fn(match)
	})
	var ee *exitError
	if err != nil && !errors.As(err, &ee) {
		return failed(err)
	}
	return err
}

// asOfHint is the line a dry run ends with: the command that acts on
// exactly what it counted, with the user's store and filters. A purge's
// --older-than is passed as the time it stood for (--failed-before).
func asOfHint(cmd *cobra.Command, s *selection) string {
	extra := []string{"--all"}
	if n := cmd.Name(); n == "purge" || n == "archive" || n == "restore" {
		extra = append(extra, "--yes")
	}
	if cmd.Flags().Changed("older-than") && s.failedBefore != "" {
		extra = append(extra, "--failed-before", s.failedBefore)
	}
	drop := []string{"dry-run", "as-of", "older-than", "all", "yes"}
	if s.asOf == "" {
		return "to act on them: " + rerun(cmd, drop, extra...) + "\n  (this store cannot bind the set counted: dead letters recorded meanwhile are included)"
	}
	return "to act on exactly these, and on none recorded or failed again since: " + rerun(cmd, drop, append(extra, "--as-of", hintWord(s.asOf))...)
}

// parseAge parses --older-than: a Go duration (90m, 72h) or whole days (7d).
func parseAge(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n, derr := strconv.Atoi(strings.TrimSuffix(s, "d"))
		if !strings.HasSuffix(s, "d") || derr != nil || n > 36500 {
			return 0, usageErrorf("--older-than %q: want a duration like 90m, 72h or 7d", s)
		}
		d = time.Duration(n) * 24 * time.Hour
	}
	if d <= 0 {
		return 0, usageErrorf("--older-than %q: want a positive duration", s)
	}
	return d, nil
}

// deadLetters is "1 dead letter" or "n dead letters".
func deadLetters(n int) string {
	if n == 1 {
		return "1 dead letter"
	}
	return strconv.Itoa(n) + " dead letters"
}

// uniq returns ids without repeats, in their first order.
func uniq(ids []string) []string {
	seen := make(map[string]bool, len(ids))
	out := ids[:0:0]
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func newDLQReplay() *cobra.Command {
	var (
		sf           storeFlags
		sel          selection
		trSpec       string
		trNamespace  string
		trPartitions int
		dryRun       bool
		force        bool
	)
	cmd := &cobra.Command{
		Use:   "replay ID... | --all | --reason R | --message-type M | --saga-type S | --fingerprint F [--dry-run] [--as-of MARK]",
		Short: "Re-queue dead letters, with their original IDs",
		Long: `Replay dead letters: each envelope is published again, with its original ID
and body (and the header idem-replayed-at), onto the store's own queue (the same PostgreSQL schema
or SQLite file), or onto the broker --transport names (default
IDEM_TRANSPORT: nats://host:4222, amqp://user:pass@host:5672/vhost or
redis://user:pass@host:6379/0), where the engine consumes it as a new
delivery. Give the transport, --namespace and --partitions the engines use:
replay refuses a JetStream stream that does not exist and a RabbitMQ or
Redis partition count that differs from the namespace's, and leaves the engines' JetStream consumer as it is.

The dead letter is kept, with the replay in its history: pending until an
engine consumes the message, then succeeded (consumed without failing
again), duplicate (not applied: an earlier copy of the message was), or
failed (dead-lettered again, with the new failure; the first failure is
kept), or not sent when the publish fails. Replay only
re-queues: idem dlq show ID (or the console) shows the outcome.

Use it once the cause is fixed (a handler bug deployed, a missing saga type
registered). An engine on an embedded NATS server (` + transportEmbedded + `) is
reached through its admin API instead: POST /api/dead-letters/{id}/replay.

Name the dead letters by ID, or pass --all to replay every one; --reason
keeps those with one reason (for example malformed_body, unknown_type,
saga_not_found, permanent_error, retries_exhausted), --message-type those of
one message type, --saga-type those of one saga type and --fingerprint those of
one failure group (idem dlq groups lists them). A filter without IDs
selects in bulk, as --all does. --dry-run prints what would be replayed and
the count, and changes nothing; it ends with the command that replays
exactly those, --as-of MARK, so that a dead letter recorded (or failed
again) after the dry run is left alone. Without --as-of a bulk replay acts on
the dead letters as of its start.

A bulk replay selects the unresolved dead letters only (never replayed, or
the latest replay failed or was not sent): --state pending, resolved or all
selects the others. A dead letter whose latest replay is pending is never
replayed again until it is settled; one whose latest replay succeeded is
replayed by ID only with --force (its message runs again).

Prints one line per dead letter and a count. Exits 1 if any replay failed or
a named ID does not exist (the others are still replayed).
` + storeHelp,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sel.check(cmd, args); err != nil {
				return err
			}
			ctx := store.WithReplayBy(cmd.Context(), cliActor()) // recorded with each replay
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			// The engine is never started: ReplayDeadLetter needs only the
			// store and the transport.
			var tr transport.Transport = st
			if trSpec == transportEmbedded {
				return usageErrorf("--transport %s runs inside the idem serve process: replay through its admin API (POST /api/dead-letters/{id}/replay), or pass its nats:// URL", transportEmbedded)
			}
			if trSpec != "" {
				t, closeTr, err := openTransportWith(ctx, trSpec, "", transportOptions{Namespace: trNamespace, Partitions: trPartitions, PublishOnly: true})
				if err != nil {
					return &exitError{code: 2, err: err}
				}
				defer closeTr()
				tr = t
			}
			eng, err := idem.NewEngine(st, tr, &idem.Config{Logger: slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))})
			if err != nil {
				return failed(err)
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			var done, bad int
			replay := func(id, typ string) {
				if dryRun {
					done++
					fmt.Fprintf(out, "would replay %s (%s)\n", clean(id), clean(typ))
					return
				}
				replayFn := eng.ReplayDeadLetter
				if force && !sel.all {
					replayFn = eng.ForceReplayDeadLetter
				}
				err := replayFn(ctx, id)
				switch {
				case errors.Is(err, store.ErrNotFound):
					bad++
					fmt.Fprintf(errOut, "no dead letter with ID %s\n", clean(id))
				case errors.Is(err, idem.ErrReplaySucceeded):
					bad++
					fmt.Fprintf(errOut, "not replayed %s: its latest replay succeeded; replaying it again would run its message again (pass --force to replay it anyway)\n", clean(id))
				case errors.Is(err, store.ErrReplayPending):
					bad++
					fmt.Fprintf(errOut, "not replayed %s: its latest replay is still pending (%s shows when it is settled)\n", clean(id), onStore(cmd, "idem dlq show", "--", hintWord(id)))
				case err != nil:
					bad++
					fmt.Fprintf(errOut, "replay %s: %v\n", clean(id), err)
				default:
					done++
					fmt.Fprintf(out, "re-queued %s (%s)\n", clean(id), clean(typ))
				}
			}
			if sel.all {
				if err := sel.bound(ctx, st); err != nil {
					return err
				}
				err = sel.each(ctx, st, time.Time{}, func(page []store.DeadLetter) error {
					for _, d := range page {
						if ctx.Err() != nil {
							return failed(ctx.Err())
						}
						replay(d.ID, d.Envelope.Type)
					}
					return nil
				})
			} else {
				for _, id := range uniq(args) {
					if ctx.Err() != nil {
						err = failed(ctx.Err())
						break
					}
					d, gerr := st.GetDeadLetter(ctx, id)
					typ := "?"
					if gerr == nil {
						typ = d.Envelope.Type
					}
					replay(id, typ)
				}
			}
			switch {
			case err != nil:
				fmt.Fprintf(out, "re-queued %s before stopping\n", deadLetters(done))
				return err
			case bad > 0:
				return failed(fmt.Errorf("re-queued %d of %s; %d failed", done, deadLetters(done+bad), bad))
			case done == 0:
				fmt.Fprintln(out, "no dead letters match")
			case dryRun:
				fmt.Fprintf(out, "would replay %s (dry run: nothing changed)\n", deadLetters(done))
				if sel.all {
					fmt.Fprintln(out, asOfHint(cmd, &sel))
				}
			default:
				fmt.Fprintf(out, "re-queued %s: each replay is pending until an engine consumes it; %s shows whether it succeeded or failed again\n", deadLetters(done), onStore(cmd, "idem dlq show", "ID"))
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&sel.all, "all", false, "replay every dead letter the filters select")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the dead letters that would be replayed and their count; change nothing")
	cmd.Flags().StringVar(&trSpec, "transport", os.Getenv("IDEM_TRANSPORT"), "publish onto this broker instead of the store's queue: "+brokerExamples()+" (default from IDEM_TRANSPORT)")
	cmd.Flags().StringVar(&trNamespace, "namespace", "", "with --transport: the engines' JetStream stream (default IDEM) or RabbitMQ namespace (default idem)")
	cmd.Flags().IntVar(&trPartitions, "partitions", 0, "with a RabbitMQ or Redis --transport: the engines' partition count (default 16); a different count is refused")
	cmd.Flags().StringVar(&sel.reason, "reason", "", "only dead letters with this reason (selects in bulk without IDs)")
	typeFlags(cmd, &sel.sagaType, &sel.msgType, "only dead letters of this saga type (selects in bulk without IDs)", "only dead letters of this message type (selects in bulk without IDs)")
	cmd.Flags().StringVar(&sel.asOf, "as-of", "", "act only on the dead letters counted by the dry run that printed this mark")
	cmd.Flags().StringVar(&sel.state, "state", "", "select by the latest replay: unresolved (default: never replayed, or it failed or was not sent), pending, resolved (it succeeded or was a duplicate) or all")
	cmd.Flags().StringVar(&sel.fingerprint, "fingerprint", "", "only the dead letters of this group (idem dlq groups; none for those recorded before fingerprints)")
	cmd.Flags().BoolVar(&force, "force", false, "replay the named dead letters even if their latest replay succeeded (their messages run again)")
	sf.register(cmd)
	return cmd
}

func newDLQPurge() *cobra.Command {
	var (
		sf       storeFlags
		sel      selection
		yes      bool
		dryRun   bool
		archived string
	)
	cmd := &cobra.Command{
		Use:   "purge ID... | --all [--reason R] [--saga-type T] [--message-type M] [--archived include|only|exclude] [--older-than DURATION | --failed-before TIME] (--dry-run | --yes [--as-of MARK])",
		Short: "Delete dead letters for good",
		Long: `Delete dead letters. The messages are gone for good: list or show them first,
and replay those worth keeping.

Name the dead letters by ID: they are deleted at once, and a named ID that
does not exist makes the command exit 1 after deleting the others (a typo
should not pass silently); --dry-run, --yes, --as-of, --archived and the
filters go with --all only (exit 2 with IDs). Or pass --all to delete every dead letter, which
refuses to run (exit 2) without --yes; with --all, --reason keeps those with
one reason, --saga-type those of one saga type, --message-type those of one
message type, and --older-than those whose
last failure is older than a Go duration (90m, 72h) or a number of days (7d),
--failed-before those whose last failure is before an RFC 3339 time.

--dry-run counts what --all would delete, changes nothing, and ends with the
command that deletes exactly those, --as-of MARK: a dead letter recorded (or
failed again) after the dry run is then kept. That command passes the dry
run's --older-than as the time it stood for, --failed-before TIME, so that a
dead letter too young at the dry run is kept even if it has aged past it
since; --older-than with --as-of is refused (exit 2). Without --as-of, purge --all
acts on the dead letters as of its start. --all selects the unresolved dead
letters only (never replayed, or the latest replay failed or was not sent);
--state pending, resolved or all selects the others. --all selects archived
dead letters (idem dlq archive) and the others; --archived only keeps the
archived ones (archive first, purge the archived later), --archived exclude
the others.

Prints how many dead letters were deleted.
` + storeHelp,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := sel.check(cmd, args); err != nil {
				return err
			}
			cutoff, err := purgeCutoff(&sel)
			if err != nil {
				return err
			}
			if sel.all && !yes && !dryRun {
				return usageErrorf("purge --all deletes dead letters for good: add --yes to confirm, or --dry-run to count them first")
			}
			if archived == "" {
				archived = string(readmodel.ArchivedInclude)
			}
			a, err := readmodel.ParseArchivedFilter(archived)
			if err != nil {
				return usageErrorf("--archived: %v", err)
			}
			sel.archived = a
			ctx := cmd.Context()
			st, _, err := sf.open(ctx, false)
			if err != nil {
				return err
			}
			defer st.Close()
			out := cmd.OutOrStdout()
			if !sel.all {
				ids := uniq(args)
				n, err := st.DeleteDeadLetters(ctx, ids)
				if err != nil {
					return failed(fmt.Errorf("delete dead letters: %w", err))
				}
				fmt.Fprintf(out, "deleted %s\n", deadLetters(n))
				if n < len(ids) {
					return failed(fmt.Errorf("%d of the %s named did not exist", len(ids)-n, deadLetters(len(ids))))
				}
				return nil
			}
			if err := sel.bound(ctx, st); err != nil {
				return err
			}
			total := 0
			err = sel.each(ctx, st, cutoff, func(page []store.DeadLetter) error {
				if dryRun {
					total += len(page)
					return nil
				}
				n, err := inspect.DeleteDeadLetters(ctx, st, sel.filter(), page)
				total += n
				if err != nil {
					return failed(err)
				}
				return nil
			})
			if dryRun {
				fmt.Fprintf(out, "would delete %s (dry run: nothing changed)\n%s\n", deadLetters(total), asOfHint(cmd, &sel))
				return err
			}
			fmt.Fprintf(out, "deleted %s\n", deadLetters(total))
			return err
		},
	}
	cmd.Flags().BoolVar(&sel.all, "all", false, "delete every dead letter the filters select (needs --yes)")
	cmd.Flags().BoolVar(&yes, "yes", false, "confirm purge --all")
	cmd.Flags().StringVar(&sel.reason, "reason", "", "with --all: only dead letters with this reason")
	typeFlags(cmd, &sel.sagaType, &sel.msgType, "with --all: only dead letters of this saga type", "with --all: only dead letters of this message type")
	cmd.Flags().StringVar(&sel.olderThan, "older-than", "", "with --all: only dead letters last failed longer ago than this (90m, 72h, 7d)")
	cmd.Flags().StringVar(&sel.failedBefore, "failed-before", "", "with --all: only dead letters last failed before this time (RFC 3339), as a dry run's --older-than prints it")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "with --all: count what would be deleted and print the --as-of that binds it; change nothing")
	cmd.Flags().StringVar(&sel.asOf, "as-of", "", "with --all: delete only the dead letters counted by the dry run that printed this mark")
	cmd.Flags().StringVar(&sel.state, "state", "", "with --all: select by the latest replay: unresolved (default), pending, resolved (it succeeded or was a duplicate) or all")
	cmd.Flags().StringVar(&archived, "archived", "", "with --all: include (default) the archived dead letters, only them, or exclude them")
	sf.register(cmd)
	return cmd
}

// purgeCutoff is the time a purge's dead letters last failed before (zero:
// any), from --failed-before, or --older-than taken from now. A dry run's
// hint then passes it as --failed-before: a relative --older-than would
// be recomputed at the confirmed run and catch dead letters that aged past
// it since the count, so it is refused together with --as-of.
func purgeCutoff(sel *selection) (time.Time, error) {
	switch {
	case sel.olderThan != "" && sel.failedBefore != "":
		return time.Time{}, usageErrorf("give --older-than or --failed-before, not both")
	case sel.olderThan != "" && sel.asOf != "":
		return time.Time{}, usageErrorf("--older-than is counted from now, so with --as-of it would select dead letters the dry run did not count: pass the --failed-before TIME the dry run printed instead")
	case sel.failedBefore != "":
		t, err := time.Parse(time.RFC3339Nano, sel.failedBefore)
		if err != nil {
			return time.Time{}, usageErrorf("--failed-before %.40q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", sel.failedBefore)
		}
		return t, nil
	}
	age, err := parseAge(sel.olderThan)
	if err != nil || age <= 0 {
		return time.Time{}, err
	}
	cutoff := time.Now().UTC().Add(-age)
	sel.olderThan, sel.failedBefore = "", cutoff.Format(time.RFC3339Nano)
	return cutoff, nil
}

// writeHistory prints the first failure and every replay with its outcome.
func writeHistory(w io.Writer, d *store.DeadLetter) {
	fmt.Fprintln(w, "History:")
	if h := admin.History(d); h != "" {
		fmt.Fprintf(w, "  %s\n", cleanText(h))
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	first, firstErr := cmp.Or(d.FirstReason, d.Reason), cmp.Or(d.FirstError, d.Error)
	fmt.Fprintf(tw, "  %s\tfirst failure\t%s: %s\n", formatTime(d.FirstFailedAt), clean(first), clean(firstLine(firstErr)))
	for _, r := range d.Replays {
		outcome := "pending: re-queued, not consumed yet"
		switch r.Outcome {
		case store.ReplayFailed:
			outcome = fmt.Sprintf("failed again at %s with %s: %s", formatTime(r.SettledAt), clean(r.Reason), clean(firstLine(r.Error)))
		case store.ReplaySucceeded:
			outcome = "succeeded at " + formatTime(r.SettledAt) + ": consumed without failing again"
		case store.ReplayDuplicate:
			outcome = "duplicate at " + formatTime(r.SettledAt) + ": not applied: an earlier copy of this message was applied"
		case store.ReplayNotSent:
			outcome = fmt.Sprintf("not sent at %s: %s", formatTime(r.SettledAt), clean(firstLine(r.Error)))
		}
		what := "replayed"
		if r.By != "" {
			what += " by " + clean(r.By)
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", formatTime(r.At), what, outcome)
	}
	_ = tw.Flush()
}

// firstLine is the first line of s.
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
